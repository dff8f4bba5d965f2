"""The change history as people read it: the history page, `GET /api/v1/history`, and the
History section of object pages (the recording side is core/history.py)."""
