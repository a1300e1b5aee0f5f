"""The glossary: its file, what each stage does with it, and the topology key that names it."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT, VOXWEFT
from voxweft.actors.glossary import Glossary, GlossaryError
from voxweft.deploy.topology import TopologyError, load
from voxweft.tools.bench import terms

TEXT = """# names and terms
Wojciech Zaremba
Voxweft
CTranslate2
machine translation = tradução automática   # a term and its translation
hearing aids = próteses auditivas
"""


def test_the_file_names_names_and_terms_with_their_translations():
    g = Glossary.parse(TEXT)
    assert [(t.source, t.target, t.name) for t in g.entries] == [
        ("Wojciech Zaremba", "Wojciech Zaremba", True), ("Voxweft", "Voxweft", True),
        ("CTranslate2", "CTranslate2", True),
        ("machine translation", "tradução automática", False),
        ("hearing aids", "próteses auditivas", False)]
    assert g.prompt() == ("Wojciech Zaremba, Voxweft, CTranslate2, machine translation, "
                          "hearing aids.")
    assert not Glossary.parse("# nothing\n\n") and Glossary.parse("# nothing").prompt() == ""


@pytest.mark.parametrize(("text", "error"), [
    ("Voxweft\n = ponte\n", "glossary:2: '= ponte' has no term"),
    ("Voxweft\nvoxweft\n", "glossary:2: 'voxweft' is there twice"),
    ("\n".join(f"term{i}" for i in range(201)), "201 entries; at most 200"),
    # no term: its spelling would cost the square of the transcript (issue 48)
    ("Voxweft = " + "palavra " * 9, "glossary:1: 'palavra .*is no term: at most 8 words"),
    ("x" * 81, "glossary:1: .*is no term: at most 8 words, 80 characters"),
])
def test_a_bad_line_is_named(text, error):
    with pytest.raises(GlossaryError, match=error):
        Glossary.parse(text)


def test_a_transcripts_near_misses_take_the_glossarys_spelling():
    g = Glossary.parse(TEXT)
    assert g.spell("Vox weft is local, and the vox-weft page too.") == \
        "Voxweft is local, and the Voxweft page too."
    assert g.spell("We built it on c translate 2 and Voxwheft.") == \
        "We built it on CTranslate2 and Voxweft."
    assert g.spell("Wojciech Zarembah spoke.") == "Wojciech Zaremba spoke."
    # the term with an ending, and words that only look alike, are left as they are
    assert g.spell("Zaremba's talk on machine translations") == \
        "Zaremba's talk on machine translations"
    assert g.spell("the voice left a box") == "the voice left a box"
    # a term never runs across a sentence's end
    assert g.spell("Vox. Weft.") == "Vox. Weft."


def test_mt_gets_the_translations_and_its_output_is_spelled_so():
    g = Glossary.parse(TEXT)
    assert g.protect("Machine translation helps people with hearing aids.") == \
        "tradução automática helps people with próteses auditivas."
    assert g.protect("Voxweft") == "Voxweft"            # a name stays itself
    assert g.spell("A traducao automatica e boa.", "target") == \
        "A tradução automática e boa."
    assert g.found("Wojciech Zaremba uses machine translation.") == \
        ["Wojciech Zaremba", "machine translation"]
    assert g.found("Usamos tradução automática.", "target") == ["tradução automática"]


def test_the_topology_names_it_beside_itself_and_a_bad_one_is_one_line(tmp_path):
    base = (ROOT / "deploy" / "default.toml").read_text(encoding="utf-8")
    (tmp_path / "terms.txt").write_text(TEXT, encoding="utf-8")
    topo = tmp_path / "t.toml"
    topo.write_text(base.replace("[pipeline]", '[pipeline]\nglossary = "terms.txt"', 1))
    loaded = load(topo)
    assert loaded.glossary.prompt().startswith("Wojciech Zaremba")
    assert loaded.raw["pipeline"]["glossary"] == str(tmp_path / "terms.txt")
    # the path is absolute now: a topology derived from it (interpret's) still finds it
    assert loaded.with_overrides({"pipeline": {"max_lag_s": 0}}).glossary is not None
    (tmp_path / "terms.txt").write_text("Voxweft\nvoxweft\n", encoding="utf-8")
    with pytest.raises(TopologyError, match=r"pipeline.glossary: .*terms.txt:2: 'voxweft' is "
                                            "there twice"):
        load(topo)
    (tmp_path / "terms.txt").unlink()
    with pytest.raises(TopologyError, match="pipeline.glossary: glossary .* cannot read it"):
        load(topo)


def test_interpret_with_a_missing_glossary_says_so_in_one_line(tmp_path):
    done = subprocess.run([*VOXWEFT, "interpret", "--input", str(tmp_path / "x.wav"),
                           "--out", str(tmp_path / "out"), "--glossary",
                           str(tmp_path / "none.txt")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "none.txt" in lines[0] and "cannot read it" in lines[0], \
        done.stderr


def test_the_bench_glossary_and_sentences_the_repository_carries():
    glossary_path, sentences_path = terms.files("en", "pt")
    g = Glossary.read(glossary_path)
    said = terms.sentences(sentences_path)
    assert len(g.terms) >= 10 and len(said) >= 10
    for term in g.terms:   # every term is said, and scored
        assert any(term.source in g.found(s) for s in said), term
    with pytest.raises(terms.TermsError, match="no glossary for en->de"):
        terms.files("en", "de")


def test_the_score_counts_each_term_heard_and_spoken():
    g = Glossary.parse(TEXT)
    text_of = {"a": "Voxweft uses machine translation.", "b": "Wojciech Zaremba spoke."}
    row = {"played": True, "not_spoken": "", "complete": True}
    report = {"utterances": [
        {**row, "file": "a", "text": "Voxweft uses machine translation.",
         "translation": "O Voxweft usa tradução automática."},
        {**row, "file": "b", "text": "Wojciech Zarenba spoke.",
         "translation": "Wojciech Zarenba falou."},
        {**row, "file": None, "text": "x", "translation": "y"}]}
    score = terms.score(report, g, text_of)
    assert (score["terms"], score["heard"], score["spoken"]) == (3, round(2 / 3, 3),
                                                                 round(2 / 3, 3))
    assert [m["term"] for m in score["misses"]] == ["Wojciech Zaremba"]
    assert "| with glossary | 3 | 67 % | 67 % |" in terms.markdown({"with": score})


def test_placeholders_stand_for_terms_mt_would_change_and_come_back_translated():
    g = Glossary.parse(TEXT)
    held, slots = g.hold("Machine translation for hearing aids, by Voxweft.")
    assert held == "Zxq1 for Zxq2, by Voxweft." and slots == ["tradução automática",
                                                              "próteses auditivas"]
    assert g.release("zxq1 para Zxq2, pelo Voxweft.", slots) == \
        "tradução automática para próteses auditivas, pelo Voxweft."
    assert g.release("Zxq7 fica", slots) == "Zxq7 fica"          # not one of ours: left
    text = "Machine translation for hearing aids."
    assert g.missing(text, "Tradução automática para aparelhos auditivos.") == \
        ["próteses auditivas"]
    assert g.missing(text, "tradução automática para próteses auditivas") == []


def test_a_glossary_that_is_no_text_file_of_terms_is_refused_not_read_whole(tmp_path):
    import os

    big = tmp_path / "big.txt"
    big.write_bytes(b"term = termo\n" * 100_000)   # 1.3 MB
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)   # opened, it would wait for a writer for ever
    for path, words in ((big, "over 1024 KiB"), (fifo, "not a file"),
                        (tmp_path, "not a file"), ("/dev/zero", "not a file"),
                        # the environment (KEY=value lines) spoken as translations: no
                        ("/proc/self/environ", "not a file on disk")):
        with pytest.raises(GlossaryError, match=words):
            Glossary.read(path)
    assert len(Glossary.read(_write(tmp_path / "ok.txt", "term = termo\n")).terms) == 1


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path
