"""The capacity planner's trace replay: a trace (Philly-style CSV, Alibaba-style CSV or a
scenario file) replayed through the engine under static quotas, the current tree and a proposed
tree, compared with plots (`traces`: the upload read and checked; `variants`: the three
scenarios; `results`: one replay summed up; `services`: start and run one)."""
