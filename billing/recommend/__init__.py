"""Min/Max recommendations from usage history (docs/portal.md, Capacity planner): `method`
(pure: hourly demand in, a proposed min and max with the evidence out), `history` (the hourly
demand read from the usage records and the pending work), `services` (compute; file as a
capacity request)."""
