"""Reads `agoq train --tensorboard DIR`'s event files with the tensorboard package and checks that its scalars are
metrics.jsonl's numbers, step by step: every number of each record (nested objects as "outer/inner" tags; the key
"step", strings, booleans and lists left out), as float32, and nothing else.

Usage: tensorboard_check.py DIR METRICS_JSONL   (prints one line; exit status 1 on the first difference)
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def numbers(record, prefix=""):
    for key, value in record.items():
        tag = prefix + key
        if isinstance(value, dict):
            yield from numbers(value, tag + "/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and tag != "step":
            yield tag, value


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def main(tb_dir, metrics_path):
    want = {}  # (tag, step) -> value
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            for tag, value in numbers(record):
                want[(tag, record["step"])] = as_float32(value)
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    got = {}
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            got[(tag, event.step)] = event.value
    if got.keys() != want.keys():
        missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
        sys.exit(f"tags/steps differ: missing {missing[:5]} ({len(missing)}), extra {extra[:5]} ({len(extra)})")
    for key, value in want.items():
        if got[key] != value:
            sys.exit(f"{key}: metrics.jsonl {value!r}, TensorBoard {got[key]!r}")
    steps = {step for _, step in want}
    print(f"ok: {len(want)} scalars, {len({t for t, _ in want})} tags, steps {min(steps)}..{max(steps)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
