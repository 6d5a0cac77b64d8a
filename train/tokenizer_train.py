"""Step 2 - tokenizer: byte-level BPE (GPT-2 pre-tokenizer regex, byte-level
decoder), vocab 4096, special tokens <|endoftext|> (EOS / document separator,
id 0) and <|mask|> (the drafter's mask token, id 1), trained on the train split.
"""
import json
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from common import CORPUS, EOT, MASK, TOKENIZER, log

VOCAB = 4096


def texts():
    with open(CORPUS / "train.jsonl") as f:
        for line in f:
            yield json.loads(line)["text"]


def main():
    tok = Tokenizer(models.BPE())
    # ByteLevel with use_regex=True applies exactly GPT-2's pre-tokenizer regex.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=[EOT, MASK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts(), trainer=trainer)
    assert tok.token_to_id(EOT) == 0 and tok.token_to_id(MASK) == 1
    tok.save(str(TOKENIZER))
    # sanity: lossless round trip on a sample
    sample = next(texts())[:5000]
    assert tok.decode(tok.encode(sample).ids) == sample
    n_chars = n_tok = 0
    for i, t in enumerate(texts()):
        if i % 10:
            continue
        n_chars += len(t)
        n_tok += len(tok.encode(t).ids)
    log(f"tokenizer: vocab {tok.get_vocab_size()}, {n_chars / n_tok:.2f} chars/token on a 10% sample")


if __name__ == "__main__":
    sys.exit(main())
