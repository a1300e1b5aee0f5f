"""`voxweft bench`: the pipeline measured on a corpus, with its figures and report.

Modules: the run (run), its in-process floor (floor), the figures (metrics), the report
(report: its Markdown; its plots, reportplots; two compared, reportcompare; what these share,
reportformat; its files, reportfiles) and the bus alone (busbench); `corpus/` holds the five
public-domain LJ Speech clips it uses by default.
"""

from pathlib import Path

#: The default corpus: five LJ Speech 1.1 clips (public domain) with their transcripts.
DEFAULT_CORPUS = Path(__file__).resolve().with_name("corpus") / "ljspeech"
