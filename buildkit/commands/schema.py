"""`buildkit schema`: the JSON Schema of pins.yaml, for editors and CI validation."""

from __future__ import annotations

import json
import sys

from buildkit.models.pins import json_schema


def schema_command() -> None:
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
