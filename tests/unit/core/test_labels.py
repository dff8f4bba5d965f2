"""Kubernetes label syntax (core/labels.py): keys, values, NUL characters."""

import pytest

from core.labels import label_key_problem, label_value_problem, labels_problems


@pytest.mark.parametrize("key", [
    "gpu", "nvidia.com/gpu.product", "topology.kubernetes.io/zone", "a", "A_b.c-9",
    "x" * 63, "a" * 253 + "/n",
])
def test_valid_keys(key):
    assert label_key_problem(key) is None


@pytest.mark.parametrize("key, says", [
    ("gp\x00u", "contains a NUL character"),
    ("", "is not a Kubernetes label key"),
    ("-gpu", "is not a Kubernetes label key"),
    ("gpu\n", "is not a Kubernetes label key"),
    ("x" * 64, "is not a Kubernetes label key"),
    ("Nvidia.com/gpu", "prefix 'Nvidia.com' is not a DNS subdomain"),
    ("/gpu", "prefix '' is not a DNS subdomain"),
    ("a/b/c", "prefix 'a/b' is not a DNS subdomain"),
    ("a" * 254 + "/n", "is not a DNS subdomain"),
    ("nvidia.com/", "is not a Kubernetes label key"),
    ("gpü", "is not a Kubernetes label key"),
    (7, "is not text"),
])
def test_invalid_keys_say_why(key, says):
    assert says in label_key_problem(key)


def test_values():
    assert label_value_problem("k", "") is None
    assert label_value_problem("k", "NVIDIA-A100-SXM4-80GB") is None
    assert "contains a NUL character" in label_value_problem("k", "a\x00")
    assert "is not a Kubernetes label value" in label_value_problem("k", "a b")
    assert "is not a Kubernetes label value" in label_value_problem("k", "x" * 64)
    assert "is not text" in label_value_problem("k", 3)
    assert labels_problems({"ok": "yes", "bad\x00": "x", "k": "-"}) == [
        "label key 'bad\\x00' contains a NUL character",
        "label 'k': value '-' is not a Kubernetes label value (empty, or at most 63 letters, "
        "digits, '-', '_' or '.', beginning and ending with a letter or digit)"]
    assert labels_problems(["a"]) == ["['a'] is not a mapping of label keys to values"]
