"""App settings (no Qt): a JSON file in the user data folder, written atomically.

Unknown keys are kept, missing ones take defaults, and a damaged file is set aside (renamed
`.broken`) with the defaults used instead, so a bad edit never stops the app from starting.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


@dataclass
class Sampling:
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 0
    min_p: float = 0.0


@dataclass
class Settings:
    theme: str = "system"  # system, light or dark
    font_size: int = 11
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    depth: str = "Balanced"
    max_new_tokens: int = 1024
    context: int = 8192
    active_model: str = ""  # a checkpoint folder; empty: the bundled demo
    models_dir: str = ""  # empty: the platform's standard folder
    problem: str = ""  # set when the file could not be read (shown once, not saved)

    @classmethod
    def load(cls, path: Path) -> "Settings":
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as e:
            broken = path.with_suffix(".broken")
            os.replace(path, broken)
            return cls(problem=f"{path.name} could not be read ({e}); defaults are used and the old file "
                               f"was kept as {broken.name}")
        known = {f.name for f in fields(cls)} - {"problem", "sampling"}
        s = cls(**{k: v for k, v in data.items() if k in known})
        if isinstance(data.get("sampling"), dict):
            s.sampling = Sampling(**{k: v for k, v in data["sampling"].items() if k in {f.name for f in fields(Sampling)}})
        return s

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data.pop("problem")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
