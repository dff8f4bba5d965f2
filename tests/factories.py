"""Shared factory_boy factories for the foundation's models (other apps keep their own files)."""

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from quotas.models import Flavor, Queue, QuotaEntry, Team, TeamMembership, TeamRole
from scheduling.models import Cluster, Node

PASSWORD = "pass-for-tests-1"


class UserFactory(factory.django.DjangoModelFactory):
    """A user with the password PASSWORD."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):  # noqa: N805 - factory_boy's signature
        if create:
            obj.save()


class AdminFactory(UserFactory):
    """A platform admin (staff and superuser)."""

    username = factory.Sequence(lambda n: f"admin{n}")
    is_staff = True
    is_superuser = True


class FlavorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Flavor
        django_get_or_create = ("name",)

    name = "a100-80g"
    gpu_memory_gib = 80
    node_selector = factory.LazyAttribute(lambda f: {"allot.io/flavor": f.name})


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue

    name = factory.Sequence(lambda n: f"q{n}")
    parent = None


class QuotaEntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = QuotaEntry

    queue = factory.SubFactory(QueueFactory)
    flavor = factory.SubFactory(FlavorFactory)
    resource = "gpu"
    min = Decimal(0)
    max = None
    lendable = None


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"team{n}")


class TeamMembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = TeamMembership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = TeamRole.RESEARCHER


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"cluster{n}")
    region = "bj"


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node{n}")
    flavor = factory.SubFactory(FlavorFactory)
    gpus = 8
    cpu = Decimal(64)
    memory_gib = Decimal(512)
    rack = "r1"


def workloads_set_state(workloads, state: str, **fields) -> None:
    """Put `workloads` (a queryset) in `state` for a test's setup, through the states the
    transitions table allows (the database refuses any other pair, e.g. pending -> running),
    the shortest way from each one's state; `fields` are written with the last step."""
    from collections import deque

    from scheduling.transitions import ALLOWED_TRANSITIONS

    for current in set(workloads.values_list("state", flat=True)):
        path, seen = deque([[current]]), {current}
        while path[0][-1] != state:
            steps = path.popleft()
            for nxt in sorted(ALLOWED_TRANSITIONS[steps[-1]] - seen):
                seen.add(nxt)
                path.append([*steps, nxt])
            if not path:
                raise ValueError(f"no allowed path from {current} to {state}")
        ids = list(workloads.filter(state=current).values_list("pk", flat=True))
        rows = workloads.model.objects.filter(pk__in=ids)
        for step in path[0][1:-1]:
            rows.update(state=step)
        rows.update(state=state, **fields)


def quota_update(entries, **amounts) -> int:
    """`entries.update(max=...)` for a test's setup (no signals, like `update`), keeping the
    exact columns (`max_base`, ...) the engine reads in line: `min`, `max`, `lendable`."""
    from core.quantity import amount_to_base

    done = 0
    for resource in set(entries.values_list("resource", flat=True)):
        fields = {}
        for name, amount in amounts.items():
            fields[name] = amount
            fields[f"{name}_base"] = (None if amount is None
                                      else amount_to_base(resource, Decimal(amount)))
        done += entries.filter(resource=resource).update(**fields)
    return done
