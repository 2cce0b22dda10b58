"""The pieces of the records hook (``overrides/hooks/records.py``), one job each.

- :mod:`.shortcodes`: find ``<!-- lab:NAME args -->`` in a page and parse it into a request;
- :mod:`.store`: the record roots, loading, staleness, machine order and row selection;
- :mod:`.fmt`: numbers with their units, as the prose shows them;
- :mod:`.claims`: checking a claim against every GPU record;
- :mod:`.markdown`: tables, tabs, values and claim badges as Markdown;
- :mod:`.plot`: SVG line plots that read in the light and the dark palette.
- :mod:`.generated`: sections made from all the records or the glossary (the appendices).

Everything here raises :class:`LabError` for a problem in a page or a record; the hook
turns it into a ``PluginError`` that names the page.
"""


class LabError(Exception):
    """A shortcode or record the build cannot honour; the message says why."""
