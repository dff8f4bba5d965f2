"""Where policies plug into scheduling (`scheduling.extensions`): the submission check
(`submission`) and the cycle adjuster (`cycle`), registered in `PoliciesConfig.ready()`.

Validate and priority policies run at submission; limit and placement policies run in every
scheduling cycle, and only narrow what pending work may get: nothing admitted is evicted.
"""

from __future__ import annotations

from .cycle import policy_cycle_adjuster
from .sessions import session_rules
from .submission import policy_submission_check


def register() -> None:
    """Plug the check and the adjuster into scheduling (called from AppConfig.ready)."""
    try:
        from scheduling import extensions  # noqa: PLC0415
    except ImportError:  # scheduling without hooks: nothing to plug into
        return
    extensions.register_submission_check(policy_submission_check)
    extensions.register_cycle_adjuster(policy_cycle_adjuster)
    extensions.register_session_rules(session_rules)
    from .whatif import whatif_policy_effects  # noqa: PLC0415

    extensions.register_whatif_policies(whatif_policy_effects)
