"""Validates troupe's exports against the formats' own definitions.

    validate.py atif FILE...            ATIF trajectories (PyPI `atif`)
    validate.py open-responses FILE...  Open Responses streams (the pinned
                                        OpenAPI schema and the spec's rules)

Prints one line per file and exits 1 on the first file that fails.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "troupe:"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def fail(path, message):
    print(f"FAIL {path}: {message}")
    sys.exit(1)


def check_atif(path, seen=None):
    from atif import Trajectory

    seen = seen if seen is not None else set()
    if path in seen:
        fail(path, "continued_trajectory_ref loops")
    seen.add(path)
    with open(path) as f:
        obj = json.load(f)
    version = obj.get("schema_version", "")
    if not version.startswith("ATIF-v1.") or int(version.split(".")[1]) < 7:
        fail(path, f"schema_version {version!r} is older than ATIF-v1.7")
    try:
        Trajectory.model_validate(obj)
    except Exception as e:  # pydantic.ValidationError
        fail(path, str(e))
    count = 1
    ref = obj.get("continued_trajectory_ref")
    if ref:
        count += check_atif(os.path.join(os.path.dirname(path), ref), seen)
    return count


def open_responses_validators():
    from jsonschema import Draft202012Validator

    with open(os.path.join(HERE, "open-responses.openapi.json")) as f:
        spec = json.load(f)
    stream = spec["paths"]["/responses"]["post"]["responses"]["200"]["content"][
        "text/event-stream"
    ]["schema"]
    components = {"components": spec["components"]}
    item = Draft202012Validator({"$ref": "#/components/schemas/ItemField", **components})
    # One validator per event type: the stream's oneOf, split on the
    # discriminator (`type`), so an error names the field that is wrong.
    by_type = {}
    for ref in stream["oneOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        for kind in spec["components"]["schemas"][name]["properties"]["type"]["enum"]:
            by_type[kind] = Draft202012Validator({"$ref": ref["$ref"], **components})
    return by_type, item


def check_open_responses(path, validators):
    by_type, item_v = validators
    last = None
    open_responses = set()
    open_items = {}
    lines = 0
    with open(path) as f:
        for n, line in enumerate(f, start=1):
            where = f"line {n}"
            try:
                ev = json.loads(line)
            except ValueError as e:
                fail(path, f"{where}: not JSON: {e}")
            kind = ev.get("type")
            seq = ev.get("sequence_number")
            if not isinstance(kind, str) or not kind:
                fail(path, f"{where}: no `type`")
            if not isinstance(seq, int) or isinstance(seq, bool):
                fail(path, f"{where}: no integer `sequence_number`")
            if last is not None and seq <= last:
                fail(path, f"{where}: sequence_number {seq} does not increase (after {last})")
            last = seq
            lines += 1
            if kind in by_type:
                errors = list(by_type[kind].iter_errors(ev))
                if errors:
                    e = errors[0]
                    at = "/".join(str(p) for p in e.absolute_path)
                    fail(path, f"{where} ({kind}) at /{at}: {e.message[:300]}")
            elif kind.startswith(PREFIX):
                if "item" in ev:
                    errors = list(item_v.iter_errors(ev["item"]))
                    if errors:
                        fail(path, f"{where} ({kind}): its item: {errors[0].message}")
                continue
            else:
                fail(path, f"{where}: `{kind}` is neither an Open Responses event nor `{PREFIX}` prefixed")
            if kind == "response.created":
                rid = ev["response"]["id"]
                if rid in open_responses:
                    fail(path, f"{where}: response {rid} created twice")
                open_responses.add(rid)
            elif kind in TERMINAL:
                rid = ev["response"]["id"]
                if rid not in open_responses:
                    fail(path, f"{where}: {kind} for a response never created: {rid}")
                open_responses.discard(rid)
                if open_items:
                    fail(path, f"{where}: items added and never done: {sorted(open_items)}")
            elif kind == "response.output_item.added":
                open_items[ev["output_index"]] = ev["item"]["id"]
            elif kind == "response.output_item.done":
                if open_items.pop(ev["output_index"], None) != ev["item"]["id"]:
                    fail(path, f"{where}: output_item.done for an item not added")
    if open_responses:
        fail(path, f"responses that never ended: {sorted(open_responses)}")
    return lines


def main(argv):
    if len(argv) < 3 or argv[1] not in ("atif", "open-responses"):
        print(__doc__)
        return 2
    if argv[1] == "atif":
        for path in argv[2:]:
            docs = check_atif(path)
            print(f"ok {path}: ATIF, {docs} document(s)")
    else:
        validators = open_responses_validators()
        for path in argv[2:]:
            lines = check_open_responses(path, validators)
            print(f"ok {path}: Open Responses, {lines} events")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
