"""scheduling.backends.simulated.metrics: a pod's figures, from its name alone."""

from scheduling.backends.simulated.metrics import pod_fb_used_mib, pod_gpu_util


def test_predicted_figures_are_stable_and_in_range():
    assert pod_gpu_util("allot-w7-0-0") == pod_gpu_util("allot-w7-0-0")
    values = {pod_gpu_util(f"allot-w{i}-0-0") for i in range(300)}
    assert min(values) >= 40 and max(values) <= 95 and len(values) > 30
    used = [pod_fb_used_mib(f"allot-w{i}-0-0", 81920) for i in range(300)]
    assert min(used) >= 81920 * 30 // 100 and max(used) <= 81920 * 90 // 100
