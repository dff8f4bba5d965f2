"""A workload's name is unique among the open workloads of its queue: a clear 400 naming the
workload holding it; ended workloads' names may be used again; another queue may reuse it."""

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Workload
from scheduling.services import workload_cancel, workloads_submit
from tests.integration.portal import conftest as portal_conftest
from tests.integration.portal.conftest import api_for, submission, submit

pytestmark = pytest.mark.django_db

org = portal_conftest.org
priority_classes = portal_conftest.priority_classes


def test_a_duplicate_open_name_is_a_clear_400(org, priority_classes):
    first = submit(org.alice, name="resnet")
    api = api_for(org.alice)
    r = api.post("/api/v1/workloads", submission(name="resnet"), format="json")
    assert r.status_code == 400
    assert r.json() == {"name": [
        f"a workload named 'resnet' is already pending in rd/vision (#{first.pk}): names are "
        "unique among a queue's open workloads; pick another name, or wait until it ends"]}
    assert Workload.objects.filter(name="resnet").count() == 1  # nothing half-saved
    # another queue may use it; after the first ends, so may this one
    carol = api_for(org.carol)
    assert carol.post("/api/v1/workloads", submission(name="resnet", queue="rd/nlp"),
                      format="json").status_code == 201
    workload_cancel(user=org.alice, workload=first)
    assert api.post("/api/v1/workloads", submission(name="resnet"),
                    format="json").status_code == 201


def test_a_batch_naming_one_twice_is_refused(org, priority_classes):
    with pytest.raises(ValidationError) as caught:
        workloads_submit(user=org.alice, items=[submission(name="a"), submission(name="a")],
                         nudge=False)
    assert "'a' is given twice for rd/vision in this batch" in str(caught.value)
    submit(org.alice, name="b")
    with pytest.raises(ValidationError) as caught:
        workloads_submit(user=org.alice, items=[submission(name="c"), submission(name="b")],
                         nudge=False)
    assert caught.value.message_dict == {"[1] name": [
        f"a workload named 'b' is already pending in rd/vision "
        f"(#{Workload.objects.get(name='b').pk}): names are unique among a queue's open "
        "workloads; pick another name, or wait until it ends"]}
    assert not Workload.objects.filter(name="c").exists()
