"""nbrecall: an archive of Jupyter notebooks as searchable, answerable institutional memory."""

__version__ = "0.1.0"
