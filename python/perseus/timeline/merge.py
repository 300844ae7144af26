"""`perseus-timeline merge`: the per-rank timeline files of one job as one Chrome/Perfetto trace,
ranks as processes, on one clock, so that a step's waits line up across ranks.

Each rank's file starts its own clock at 0 and records the wall-clock time of that origin
(the `perseus_clock` metadata event, src/engine/timeline.cc); merging shifts every rank's
events by its origin's distance from the earliest one. Across hosts the alignment is as good
as the hosts' clock synchronisation (NTP: typically well under a millisecond)."""

import argparse
import glob
import json
import re
import sys


def _origin_us(events):
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "perseus_clock":
            return float(e["args"]["origin_unix_us"])
    return None


def _rank_of(path, events):
    for e in events:
        if "pid" in e:
            return int(e["pid"])
    m = re.search(r"\.(\d+)\.json$", path)
    return int(m.group(1)) if m else 0


def merge_files(paths):
    """The merged trace (a list of events) of the timeline files `paths`."""
    loaded = []
    for path in paths:
        with open(path) as f:
            events = json.load(f)
        loaded.append((path, events, _origin_us(events)))
    origins = [o for _, _, o in loaded if o is not None]
    base = min(origins) if origins else 0.0
    merged = []
    for path, events, origin in loaded:
        shift = (origin - base) if origin is not None else 0.0
        rank = _rank_of(path, events)
        named = False
        for e in events:
            e = dict(e)
            e["pid"] = rank
            if "ts" in e:
                e["ts"] = round(float(e["ts"]) + shift, 3)
            named = named or (e.get("ph") == "M" and e.get("name") == "process_name")
            merged.append(e)
        if not named:
            merged.append({"name": "process_name", "ph": "M", "pid": rank,
                           "args": {"name": "rank %d" % rank}})
        merged.append({"name": "process_sort_index", "ph": "M", "pid": rank,
                       "args": {"sort_index": rank}})
    return merged


def _expand(patterns):
    paths = []
    for p in patterns:
        found = sorted(glob.glob(p))
        paths.extend(found if found else [p])
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="perseus-timeline",
        description="Tools for the timelines that PERSEUS_TIMELINE / start_timeline() write.")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge per-rank timeline files into one trace, ranks as "
                                     "processes (open it in ui.perfetto.dev or chrome://tracing)")
    m.add_argument("files", nargs="+", help="the ranks' files (t.0.json t.1.json ..., or 't.*.json')")
    m.add_argument("-o", "--output", required=True, help="the merged trace to write")
    args = parser.parse_args(argv)
    paths = _expand(args.files)
    try:
        merged = merge_files(paths)
    except (OSError, ValueError, KeyError) as exc:
        print("perseus-timeline: cannot merge %s: %s" % (", ".join(paths), exc), file=sys.stderr)
        return 1
    with open(args.output, "w") as f:
        json.dump(merged, f)
    print("perseus-timeline: merged %d files (%d events) into %s"
          % (len(paths), len(merged), args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
