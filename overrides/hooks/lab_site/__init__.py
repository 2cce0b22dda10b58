"""The pieces of the records hook (``overrides/hooks/records.py``), one job each.

- :mod:`.shortcodes`: find ``<!-- lab:NAME args -->`` in a page and parse it into a request;
- :mod:`.store`: the record roots, loading, staleness, and the groups of runs (one per root,
  machine and topic) in the order tabs show them;
- :mod:`.runs`: one figure over independent runs: median of the run medians, range, noise;
- :mod:`.figures`: a group's rows merged across its runs, selected by case;
- :mod:`.fmt`: numbers with their units, as the prose shows them;
- :mod:`.claims`: checking a claim against every run of every GPU;
- :mod:`.provenance`: the line that says where a tab's numbers come from;
- :mod:`.power`: board power figures and which NVML reading each is (or why there is none);
- :mod:`.markdown`: tables, tabs, values and claim badges as Markdown;
- :mod:`.series` and :mod:`.plot`: a group's rows as series, drawn as SVG line plots that
  read in the light and the dark palette;
- :mod:`.timeline`: a profiler timeline kept in a record's note, checked (drawn by :mod:`.plot`);
- :mod:`.calculators`: live models whose inputs start from the records;
- :mod:`.generated`: sections made from all the records or the glossary (the appendices, and
  Appendix A's seconds per topic and GPU: what one ``lab run --all`` costs).

Everything here raises :class:`LabError` for a problem in a page or a record; the hook
turns it into a ``PluginError`` that names the page.
"""


class LabError(Exception):
    """A shortcode or record the build cannot honour; the message says why."""
