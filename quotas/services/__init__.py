"""Writes to the quota tree. Every change builds the WHOLE tree with the change applied, checks
it with `quotas.tree_rules.validate_tree` and saves nothing unless every rule holds.

Errors are raised as one Django `ValidationError` carrying every message (each names the queue,
the key and the numbers); warnings (W1-W3) come back in the result so callers show them.
"""

from quotas.services.flavors import flavor_create, flavor_update
from quotas.services.importing import FlavorDef, QueueDef, TreeReplaceResult, tree_replace
from quotas.services.queues import queue_create, queue_delete, queue_update, quota_set
from quotas.services.tree import (
    MAX_QUOTA,
    TreeChange,
    default_namespace,
    lock_tree,
    resources,
    to_decimal,
    tree_check,
)

__all__ = [
    "MAX_QUOTA",
    "FlavorDef",
    "QueueDef",
    "TreeChange",
    "TreeReplaceResult",
    "default_namespace",
    "flavor_create",
    "flavor_update",
    "lock_tree",
    "queue_create",
    "queue_delete",
    "queue_update",
    "quota_set",
    "resources",
    "to_decimal",
    "tree_check",
    "tree_replace",
]
