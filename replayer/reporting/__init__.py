"""Reporting: results for people: HTML pages (:mod:`.report`, :mod:`.html_page`, :mod:`.plots`,
:mod:`.report_measured`, :mod:`.measured_report`), Perfetto timelines (:mod:`.timeline`), result diffs
(:mod:`.diff`) and headless-browser screenshots (:mod:`.browser`)."""
