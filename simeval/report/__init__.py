"""The report application: eval curves of run directories, and the paired comparison of two runs.

It reads results files and renders them; it evaluates nothing. The comparison is
computed once (:mod:`simeval.report.comparison`) and rendered as text
(:mod:`simeval.report.text`), JSON rows or an HTML page with figures
(:mod:`simeval.report.html`); :mod:`simeval.report.cli` is the command line
(``python -m simeval.report``).
"""
