"""A run's room: its directory (``directory.py``), its candidate database (``database.py``, with
its rows in ``rows.py`` and its migrations in ``migrations.py``), reading it back
(``records.py``), what its stored results say (``selection.py``) and the progress events its
sessions send (``events.py``). Below ``search/`` and ``train/``, so that every command reads and
writes runs the same way without reaching into another command's module."""
