"""Pages of the self-service portal (dashboard, approvals, tree editor, fleet)."""
