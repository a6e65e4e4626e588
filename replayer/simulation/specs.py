"""Hardware specs by name or file: the built-in presets (``replayer/presets/*.toml``), TOML files, a parsed
document. :mod:`.hardware` holds the spec's values, :mod:`.spec_toml` reads one TOML document (split from
:mod:`.hardware` so the values do not import their reader)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from tracekit.errors import SpecError
from tracekit.replayer.simulation.hardware import HardwareSpec
from tracekit.replayer.simulation.spec_toml import read_spec_file
from tracekit.replayer.simulation.spec_toml import spec_from_dict as build


def spec_from_dict(data: Mapping[str, Any], *, path: str | os.PathLike[str] | None = None) -> HardwareSpec:
    """Build and validate a :class:`HardwareSpec` from a parsed TOML document.

    Raises:
        SpecError: naming ``path`` and the offending key, for a missing,
            unknown, mistyped or out-of-range value.
    """
    return build(data, path=path)


def read_spec(path: str | os.PathLike[str]) -> HardwareSpec:
    """Read a spec from a TOML file.

    Raises:
        SpecError: the file is missing, is not valid TOML, or a key is bad.
    """
    return read_spec_file(path)


def list_presets() -> list[str]:
    """Names of the built-in presets (``replayer/presets/*.toml``), sorted."""
    folder = resources.files("tracekit.replayer.presets")
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".toml"))


def preset_path(name: str) -> Path:
    """Path of a built-in preset's TOML file.

    Raises:
        SpecError: no preset has that name.
    """
    if name not in list_presets():
        if os.path.isdir(name):
            raise SpecError("is a directory, not a hardware spec (a preset name or a TOML file)", path=name)
        hint = "; a list is not one spec (sweep takes --hw once per spec: --hw A --hw B)" if "," in name else ""
        raise SpecError(f"no hardware preset named {name!r}; presets: {', '.join(list_presets())}{hint}")
    return Path(str(resources.files("tracekit.replayer.presets").joinpath(f"{name}.toml")))


def load_spec(name_or_path: str | os.PathLike[str]) -> HardwareSpec:
    """A spec from a preset name (``dgx-h100``) or a TOML file path.

    An existing file, or anything with a path separator or a ``.toml``
    suffix, is read as a path; any other string is a preset name.

    Raises:
        SpecError: unknown preset, unreadable file or invalid spec.
    """
    text = os.fspath(name_or_path)
    is_name = (
        isinstance(name_or_path, str)
        and os.sep not in text
        and "/" not in text
        and not text.endswith(".toml")
        and not os.path.isfile(text)
    )
    return read_spec(preset_path(text) if is_name else text)
