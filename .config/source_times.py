#!/usr/bin/env python3
"""Modification times that say when a file's content last changed, so that
cargo rebuilds only the crates whose sources did.

Cargo decides that a workspace crate is stale when one of its source files
is newer than its last build (stable cargo has no content hashes; that is
the unstable `-Z checksum-freshness`). A fresh clone gives every file the
time of the clone, so each CI run on a warm target dir compiled all seven
of our crates again, in release and in the test build (~6 min of CPU on 2
cores), even when a commit touched one of them. Cargo's artifacts are
relocatable (they do not depend on the checkout's path), only the times are
in the way.

This script keeps, in the cargo target dir, each tracked file's sha256 and
a time at which it had that content, and before a build gives every
tracked file:
  - its recorded time, when its content is the recorded content;
  - the time of this build (now) when its content is not: newer than any
    artifact, so cargo rebuilds what reads it.

Why that is safe: every artifact newer than a file's recorded time was
built while the file had the recorded content, as long as every build into
the target dir went through `./x` since the record was kept. A build by
anything else (a plain `cargo test` in a long-lived checkout, another
checkout) leaves rustc's dep-info files (`deps/*.d`, the sources each unit
read) newer than the record: every tracked file they name gets the current
time too, so what that build compiled, from whatever content, is compiled
again, and nothing else is.

One more thing ties an artifact to a checkout: `env!("CARGO_MANIFEST_DIR")`
compiles the building checkout's path in (the testbed finds its tree that
way, tests their fixtures), and cargo does not rebuild when it changes. A
unit whose dep-info names another checkout's path there has its sources
count as changed too, so it is compiled again with this one's; units that
compile no path in (DataFusion's engine, the Flight and ArrowSAM crates)
are kept wherever they were built.

  source_times.py restore --root DIR --target DIR
      sets the times; the record to keep waits beside the old one (.pending)
  source_times.py record --target DIR
      keeps the pending record (after the builds, pass or fail)
"""

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time

RECORD = "testbed-source-times.json"
PENDING = RECORD + ".pending"
VERSION = 1


def log(msg):
    print("[x] " + msg, file=sys.stderr)


def tracked_files(root):
    """Paths (relative to root) of the files git tracks, or None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached"],
            check=True, capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dep_info_files(target):
    """rustc's dep-info files of every profile and target triple:
    <profile>/deps/*.d and <triple>/<profile>/deps/*.d."""
    for pattern in ("*/deps/*.d", "*/*/deps/*.d"):
        yield from glob.glob(os.path.join(target, pattern))


def to_compile_again(target, since_ns, root):
    """What the dep-info files say must be compiled again, in one pass over
    them: (the paths read by units built after since_ns, the paths read by
    units that compiled in the path of a checkout other than root through
    `# env-dep:CARGO_MANIFEST_DIR=...`). Paths as written: relative to the
    workspace that built them, or absolute."""
    root = os.path.realpath(root)
    unseen, elsewhere = set(), set()
    for path in dep_info_files(target):
        try:
            newer = os.stat(path).st_mtime_ns > since_ns
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            continue
        foreign = False
        if "# env-dep:CARGO_MANIFEST_" in text:
            for line in text.splitlines():
                for var in ("# env-dep:CARGO_MANIFEST_DIR=", "# env-dep:CARGO_MANIFEST_PATH="):
                    if line.startswith(var):
                        value = os.path.realpath(line[len(var):])
                        foreign |= value != root and not value.startswith(root + os.sep)
        if newer:
            unseen |= dep_info_paths(text)
        elif foreign:
            elsewhere |= dep_info_paths(text)
    return unseen, elsewhere


def dep_info_paths(text):
    """The paths a dep-info file lists: "output: source source..." and
    "source:" lines; spaces in a path are escaped with a backslash."""
    named = set()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        _, sep, rest = line.partition(": ")
        if not sep:
            rest = line[:-1] if line.endswith(":") else ""
        for p in re.split(r"(?<!\\) ", rest):
            if p:
                named.add(p.replace("\\ ", " "))
    return named


def tracked_among(named, tracked):
    """The tracked paths that a dep-info path names, matched by their
    trailing components (the building checkout may be anywhere)."""
    hits = set()
    for p in named:
        parts = p.split("/")
        for i in range(len(parts)):
            rel = "/".join(parts[i:])
            if rel in tracked:
                hits.add(rel)
                break
    return hits


def load_record(target):
    """The record's files and when it was kept, or ({}, None, why not)."""
    path = os.path.join(target, RECORD)
    if not os.path.exists(path):
        return {}, None, "no record of earlier builds in this target dir"
    try:
        with open(path) as f:
            record = json.load(f)
        if record.get("version") != VERSION:
            return {}, None, "the record is of another version"
        files = record["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, None, "the record %s cannot be read (%s)" % (path, e)
    return files, os.stat(path).st_mtime_ns, None


def restore(root, target):
    now = time.time_ns()
    paths = tracked_files(root)
    if paths is None:
        log("not a git checkout: file times left as they are")
        return
    old, kept, why_not = load_record(target)
    tracked = set(paths)
    # Built since the record by something it did not see, or with another
    # checkout's path compiled in: compiled again.
    unseen, elsewhere = set(), set()
    if kept:
        read_unseen, read_elsewhere = to_compile_again(target, kept, root)
        unseen = tracked_among(read_unseen, tracked)
        elsewhere = tracked_among(read_elsewhere, tracked) - unseen
        unseen |= elsewhere
    files, same = {}, 0
    for rel in paths:
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        digest = sha256(path)
        seen = old.get(rel)
        if why_not:
            when = os.stat(path).st_mtime_ns
        else:
            if seen and seen[0] == digest and rel not in unseen:
                when = seen[1]
                same += 1
            else:
                when = now
            os.utime(path, ns=(when, when))
        files[rel] = [digest, when]
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, PENDING), "w") as f:
        json.dump({"version": VERSION, "files": files}, f)
    if why_not:
        log("source times: %s; the %d tracked files keep their times" % (why_not, len(files)))
    else:
        log("source times: %d of %d tracked files unchanged since they were built; "
            "the rest count as changed (%d read by a build ./x did not see, "
            "%d by one with another checkout's path compiled in)"
            % (same, len(files), len(unseen) - len(elsewhere), len(elsewhere)))


def record(target):
    pending = os.path.join(target, PENDING)
    if not os.path.exists(pending):
        return
    kept = os.path.join(target, RECORD)
    os.replace(pending, kept)
    # Its time says when the builds ended: a dep-info file newer than that
    # was written by a build this record did not see.
    os.utime(kept, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("restore")
    r.add_argument("--root", required=True)
    r.add_argument("--target", required=True)
    k = sub.add_parser("record")
    k.add_argument("--target", required=True)
    args = parser.parse_args()
    if args.action == "restore":
        restore(args.root, args.target)
    else:
        record(args.target)


if __name__ == "__main__":
    sys.exit(main())
