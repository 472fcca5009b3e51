"""PEP 825 variant descriptions: a wheel's `.dist-info/variant.json` and an index's
`{name}-{version}-variants.json`, in the form uv 0.13 accepts (PEP 825's fields plus
the `providers` table naming the installer's built-in provider). Pure functions,
standard library only: `cpubuild publish` imports this.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import UsageError

SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
LABEL = re.compile(r"^[0-9a-z_.]{1,16}\Z")  # a PEP 825 variant label
NULL_LABEL = "null"  # PEP 825: the variant with no properties
VARIANT_JSON = "variant.json"  # a variant wheel's description, in its .dist-info


class VariantsJsonConflict(UsageError):
    """Two descriptions of one variant label disagree."""


def document(*, namespace: str, feature: str, provider: str, labels: dict[str, str | None]) -> dict[str, Any]:
    """A variant.json (one label) or an index's variants.json (every label): label -> the
    value of `namespace :: feature`, or None for the null variant."""
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": [namespace]},
        "providers": {namespace: {"requires": [provider]}},
        "variants": {label: ({namespace: {feature: [value]}} if value else {}) for label, value in labels.items()},
    }


def merge_variant_documents(old: dict[str, Any] | None, new: dict[str, Any], *, where: str) -> dict[str, Any]:
    """Labels of both (PEP 825: an index's variants.json grows); a label described
    differently in the two is a VariantsJsonConflict."""
    if old is None:
        return new
    try:
        variants = dict(old["variants"])
        for label, properties in new["variants"].items():
            if label in variants and variants[label] != properties:
                raise VariantsJsonConflict(f"{where}: variant {label!r} is {json.dumps(variants[label])} there, "
                                           f"this wheel says {json.dumps(properties)}")
            variants[label] = properties
        namespaces = [*old["default-priorities"]["namespace"]]
        namespaces += [n for n in new["default-priorities"]["namespace"] if n not in namespaces]
        providers = {**old["providers"], **new["providers"]}
    except (KeyError, TypeError, AttributeError) as exc:
        raise VariantsJsonConflict(f"{where}: not a variants.json cpubuild can merge ({exc})") from None
    return {"$schema": new["$schema"], "default-priorities": {"namespace": namespaces}, "providers": providers,
            "variants": dict(sorted(variants.items()))}


def dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()


def index_file_name(wheel_name: str) -> str:
    """`{name}-{version}-variants.json` for a wheel file name (its first two fields)."""
    name, version = wheel_name.split("-")[:2]
    return f"{name}-{version}-variants.json"
