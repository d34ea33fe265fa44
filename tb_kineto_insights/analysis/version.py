"""The version of what a summary contains, in a module of its own so that code that only
names it (the cache's folder ``v<ANALYSIS_VERSION>``, ``history`` reading headline
records) need not import the analysis itself (``summary.py`` re-exports it)."""

#: Version of a summary's content. It names the cache's folders (``v<ANALYSIS_VERSION>``)
#: and is checked in every entry read, so that summaries, errors and headlines made by
#: other code are computed again, not served. Bump it in the commit that changes what a
#: summary holds or how a value in it comes out for the same trace (a field added,
#: removed or retyped; a number, verdict or title computed differently), and once more
#: in a merge whose sides both bumped it. A schema change, or a rule added or removed,
#: changes the cache key by itself (schema fingerprint, rule ids), but bump it for those
#: too. ``git log -p`` of this file tells what each version changed.
ANALYSIS_VERSION = 30
