"""Safe reading of multi-document YAML: the C safe loader, no aliases, bounded size."""

from __future__ import annotations

from typing import Any

import yaml
from django.core.exceptions import ValidationError

try:
    SafeLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    SafeLoader = yaml.SafeLoader

MAX_BYTES = 8 * 1024 * 1024
MAX_DOCUMENTS = 10_000


def load_documents(text: str | bytes, *, source: str) -> list[dict[str, Any]]:
    """The mapping documents of a YAML stream (empty documents skipped).

    Refuses anchors and aliases outright (alias "billion laughs" bombs expand exponentially;
    no quota manifest needs them), streams past MAX_BYTES, and non-mapping documents.
    """
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_BYTES:
        raise ValidationError(f"{source}: {size} bytes is larger than the limit of {MAX_BYTES}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError(f"{source}: not UTF-8 text ({exc.reason})") from exc
    try:
        for token in yaml.scan(text, Loader=SafeLoader):
            if isinstance(token, yaml.AliasToken | yaml.AnchorToken):
                mark = token.start_mark
                raise ValidationError(
                    f"{source}: line {mark.line + 1}: YAML anchors and aliases are not "
                    "accepted (write each value out)"
                )
        documents = list(yaml.load_all(text, Loader=SafeLoader))
    except yaml.YAMLError as exc:
        raise ValidationError(f"{source}: not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ValidationError(f"{source}: YAML nested too deeply") from exc
    if len(documents) > MAX_DOCUMENTS:
        raise ValidationError(
            f"{source}: {len(documents)} documents is more than the limit of {MAX_DOCUMENTS}"
        )
    out = []
    for index, doc in enumerate(documents, start=1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValidationError(
                f"{source}: document {index} is a {type(doc).__name__}, not a Kubernetes object"
            )
        out.append(doc)
    return out
