"""Step 5b - the drafter into examples/k3-pair/: WORK/draft/hf (SpecForge's save_pretrained +
apply_legacy_rope_scaling) re-saved with bfloat16 weights (as the code pair's) -> examples/k3-pair/draft/,
and examples/k3-pair/target.gguf = WORK/target.gguf."""
import shutil
import sys

from k3common import DRAFT_DIR, EXAMPLE_DIR, TARGET_GGUF, TOKENIZER, log, setup_torch

torch = setup_torch()


def main():
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel
    out = EXAMPLE_DIR / "draft"
    d = DSparkDraftModel.from_pretrained(DRAFT_DIR / "hf", dtype=torch.float32).to(torch.bfloat16)
    if out.exists():
        shutil.rmtree(out)
    d.save_pretrained(out)
    apply_legacy_rope_scaling(str(out))
    shutil.copyfile(TARGET_GGUF, EXAMPLE_DIR / "target.gguf")
    shutil.copyfile(TOKENIZER, EXAMPLE_DIR / "tokenizer.json")
    log(f"export: {out} (bf16), {EXAMPLE_DIR / 'target.gguf'}, tokenizer.json")


if __name__ == "__main__":
    sys.exit(main())
