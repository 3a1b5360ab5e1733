"""The reasoning depth the chat's next reply runs at: its one owner in the app (no Qt).

The user chooses it (the slider, the lower-depth offer); a loaded model resolves it by the runtime's
rules (runtime/depth.py: `usable_level`, the table's default), never by a rule of the app's own; the
slider only shows what this says. The settings keep it for the next start, written here and nowhere
else. A choice the loaded model cannot run is refused, so what the slider shows and what the next
reply runs at are the same level.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.api import find_level, level_names, lower_level, usable_level


class DepthChoice:
    def __init__(self, settings, save: Callable[[], None], loaded: Callable[[], object]):
        """`save` writes the settings now; `loaded()` is the loaded model (app/workers.py LoadedModel) or None."""
        self.settings, self._save, self._loaded = settings, save, loaded
        self.name = settings.depth

    def _levels(self) -> list:
        model = self._loaded()
        return list(model.levels) if model is not None else []

    def _set(self, name: str) -> None:
        self.name = self.settings.depth = name

    def choose(self, name: str) -> bool:
        """The user's choice, saved at once; refused (False) when the loaded model cannot run level `name`
        (or, with none loaded, when the depth table has no such level)."""
        model = self._loaded()
        ok = any(s.name == name and s.available for s in model.levels) if model is not None \
            else name in level_names()
        if ok and name != self.name:
            self._set(name)
            self._save()
        return ok

    def resolve(self) -> str:
        """After a load: the chosen depth if this model can run it, else the nearest usable one below it
        (`usable_level`); else the engine's default; else the lowest that runs. Then `avoid_estimated`;
        returns its line ('' when it changed nothing)."""
        model, levels = self._loaded(), self._levels()
        usable = usable_level(levels, self.name) or usable_level(levels, model.default_depth) or \
            next((s for s in levels if s.available), None)
        if usable is not None:
            self._set(usable.name)
        return self.avoid_estimated()

    def avoid_estimated(self) -> str:
        """A chat never starts on a level whose thinker's widths are only estimated: such a depth becomes
        the engine's default; returns the line that says why ('' when nothing changed)."""
        model = self._loaded()
        level = next((s for s in model.levels if s.name == self.name), None) if model is not None else None
        default = model.default_depth if model is not None else ""
        if level is None or not level.estimated or not default or default == level.name:
            return ""
        self._set(default)
        return (f"Reasoning depth is {default}, not {level.name}: {level.name} would think with {level.think}, whose "
                "widths are only estimated (not verified against a published slice). Verify nesting in the model "
                f"manager, or choose {level.name} again for this chat.")

    def level(self):
        """The runtime's DepthLevel of the chosen depth (ElasticError when it cannot run: the message says why)."""
        return find_level(self._levels(), self.name)

    def lower(self) -> str | None:
        """The next available level below the chosen one (offered when a reply runs out of memory)."""
        lower = lower_level(self._levels(), self.name) if self._loaded() is not None else None
        return lower.name if lower is not None else None
