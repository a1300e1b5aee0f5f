"""Tiny random-weight models built offline, for driving real engine code without real weights.

Recipe from shared/MODELS.md ("ctranslate2 (NLLB and friends)"): a sentencepiece model trained
on a dozen lines, an NllbTokenizer over its pieces, a random M2M100 model with d_model 32,
converted with CTranslate2's TransformersConverter. Needs torch, transformers and
sentencepiece (test-only dependencies).
"""

from __future__ import annotations

import shutil
from pathlib import Path

LINES = [
    "The cat is in the garden.", "O gato está no jardim.", "El gato está en el jardín.",
    "Good morning, how are you?", "Bom dia, como você está?", "Buenos días, ¿cómo estás?",
    "The doctor said the patient needs rest.", "O médico disse que o paciente precisa descansar.",
    "We will travel to the city tomorrow.", "Vamos viajar para a cidade amanhã.",
    "I like to read books in the evening.", "Eu gosto de ler livros à noite.",
]
LANGS = ["eng_Latn", "por_Latn", "spa_Latn"]


def build_tiny_nllb(out: Path) -> Path:
    """Write a CTranslate2 NLLB-style model folder under `out`; return the folder."""
    import ctranslate2
    import sentencepiece as spm
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.txt").write_text("\n".join(LINES), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(out / "corpus.txt"), model_prefix=str(out / "sp"), vocab_size=150,
        model_type="bpe", character_coverage=1.0, bos_id=0, pad_id=1, eos_id=2, unk_id=3,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(out / "sp.model"))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    # transformers 5: vocab= (vocab_file= silently gives an empty vocabulary); it appends
    # NLLB's 200+ language codes as special tokens.
    tok = NllbTokenizer(vocab=vocab, merges=[], src_lang="eng_Latn", tgt_lang="por_Latn")
    config = M2M100Config(
        vocab_size=len(tok), d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=tok.pad_token_id,
        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config).eval()
    hf = out / "hf"
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    ct2 = out / "nllb-tiny-ct2"
    ctranslate2.converters.TransformersConverter(str(hf), copy_files=["tokenizer.json"]) \
        .convert(str(ct2), quantization="int8", force=True)
    # As a real NLLB conversion ships it: the sentencepiece model beside model.bin.
    shutil.copy(out / "sp.model", ct2 / "sentencepiece.bpe.model")
    return ct2
