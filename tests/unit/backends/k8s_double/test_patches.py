"""tests.k8s_double.patches: the double's patches, so its answers can be trusted."""

import pytest

from tests.k8s_double.errors import ApiError
from tests.k8s_double.patches import apply_patch, json_patch, merge_patch, strategic_merge_patch

JOB = {
    "spec": {
        "suspend": True,
        "template": {"spec": {
            "nodeSelector": {"a": "1", "b": "2"},
            "containers": [{"name": "main", "image": "x", "env": [{"name": "A", "value": "1"}]},
                           {"name": "side", "image": "y"}],
        }},
    },
}


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists():
    patched = merge_patch(JOB, {"spec": {"suspend": False, "template": {"spec": {
        "nodeSelector": {"b": None, "c": "3"}, "containers": [{"name": "only"}]}}}})
    assert patched["spec"]["suspend"] is False
    assert patched["spec"]["template"]["spec"]["nodeSelector"] == {"a": "1", "c": "3"}
    assert patched["spec"]["template"]["spec"]["containers"] == [{"name": "only"}]
    assert JOB["spec"]["suspend"] is True  # the original is untouched


def test_strategic_merge_patch_merges_named_lists():
    patched = strategic_merge_patch(JOB, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "z"}, {"name": "new", "image": "n"},
        {"name": "side", "$patch": "delete"}]}}}})
    containers = patched["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "new"]
    assert containers[0] == {"name": "main", "image": "z", "env": [{"name": "A", "value": "1"}]}


def test_json_patch_operations():
    patched = json_patch(JOB, [
        {"op": "replace", "path": "/spec/suspend", "value": False},
        {"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "c"}},
        {"op": "remove", "path": "/spec/template/spec/nodeSelector/a"},
    ])
    assert patched["spec"]["suspend"] is False
    assert patched["spec"]["template"]["spec"]["containers"][-1] == {"name": "c"}
    assert patched["spec"]["template"]["spec"]["nodeSelector"] == {"b": "2"}
    with pytest.raises(ApiError) as error:
        json_patch(JOB, [{"op": "test", "path": "/spec/suspend", "value": False}])
    assert error.value.code == 422


def test_unknown_patch_type_is_415():
    with pytest.raises(ApiError) as error:
        apply_patch(JOB, {}, "application/yaml")
    assert error.value.code == 415
