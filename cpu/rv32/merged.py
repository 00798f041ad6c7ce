"""``deltachip merge --firmware``: the RISC-V core as the chip, a program's memory images in it.

Takes: a firmware spec (the name of a shipped program, ``calc`` or ``hello``..., built with
:mod:`firmware.toolchain`; ``python`` (or ``micropython``): MicroPython, built and cached by
:mod:`firmware.micropython.build`; or the path of an ELF), the core's sizes and the base.
Gives: :class:`Firmware` (the program's memory images as :func:`cpu.rv32.loader.load_program`
makes them, its name and sha256, and the tool it answers, for the manifest) and
:func:`core_for`: the compiled core
for the base's shapes from the core cache (:func:`cpu.rv32.engines.compiled_core`,
compiled on first use: minutes and several GB at real shapes).

The tool a program answers: a shipped program declares it in its package (``TOOL`` in
``firmware/<name>/__init__.py``: an OpenAI-style function declaration, as a chat template is
told about it; calc's ``calc``, MicroPython's ``python``); an ELF named like a shipped
program (``calc.elf``) answers that program's tool, any other ELF a tool named after its
file (``prog.elf``: ``prog``) with one parameter ``input``. A merge with several programs
(``--firmware calc --firmware python``) has one tool per program; the bridge runs a call on
the program whose tool the call names (:func:`tool_name`).

The target: a base with Qwen3.5-4B's GDN heads and MLP width gets ``qwen3.5-4b`` (the core
cache's entry that ``deltachip run --target qwen3.5-4b`` uses too); any other base, its own
config.json as the target (its GDN head shapes and MLP width; the chip keeps its own
residual either way, as the routed layout wants).
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from backends.chipdir.stfile import MergeError

if TYPE_CHECKING:
    from backends.compile.emit import Emission


@dataclass
class Firmware:
    """A program loaded for the core: its images (memory name -> words) and what the
    manifest says of it."""
    name: str
    path: Path
    sha256: str
    images: dict[str, list[int]]
    entry: int
    sizes: Any                              # cpu.rv32.build.CoreSizes
    core: dict[str, Any] = field(default_factory=dict)
    #: the tool it answers (an OpenAI-style function declaration: see the module docstring)
    tool: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_name(self) -> str:
        return tool_name(self.tool)

    def manifest(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.path.name, "sha256": self.sha256,
                "tool": self.tool,
                "entry": f"0x{self.entry:08x}", "core": self.core,
                "core_sizes": {"code_words": self.sizes.code_words,
                               "rodata_words": self.sizes.rodata_words,
                               "ram_words": self.sizes.ram_words}}


#: the shipped programs whose packages declare a tool (program -> its package), and the
#: names a spec may give them by (``python`` is MicroPython's tool)
TOOL_PACKAGES = {"calc": "firmware.calc", "micropython": "firmware.micropython"}
ALIASES = {"python": "micropython"}


def tool_name(tool: dict[str, Any]) -> str:
    """The name calls give a tool declaration (``tool["function"]["name"]``)."""
    return str((tool.get("function") or {}).get("name", ""))


def declared_tool(program: str) -> dict[str, Any]:
    """The tool program ``program`` answers (see the module docstring)."""
    import importlib
    pkg = TOOL_PACKAGES.get(ALIASES.get(program, program))
    if pkg is not None:
        return importlib.import_module(pkg).TOOL
    return {"type": "function", "function": {
        "name": program, "description": f"Runs the program {program} on a RISC-V computer "
        "inside the model with the text given as its input; answers with what it prints.",
        "parameters": {"type": "object", "properties": {"input": {
            "type": "string", "description": "the program's input text"}},
            "required": ["input"]}}}


def firmware_elf(spec: str, workdir: Path) -> tuple[str, Path]:
    """(name, ELF path) of ``spec``: a shipped program's name (built into ``workdir``;
    MicroPython into its cache), or the path of an ELF."""
    from firmware import toolchain
    p = Path(spec)
    if p.is_file():
        return p.stem, p
    programs = toolchain.shipped_programs()
    if spec in programs:
        return spec, toolchain.build(programs[spec], workdir / f"{spec}.elf")
    if ALIASES.get(spec, spec) == "micropython":
        from firmware.micropython import build as mp_build
        return "micropython", mp_build.elf_path()
    raise MergeError(f"--firmware {spec}: no such ELF file, nor a shipped program (one of "
                     f"{', '.join(sorted([*programs, 'micropython', 'python']))})")


def load_firmware(spec: str, sizes: Any = None) -> Firmware:
    """The program ``spec`` (see :func:`firmware_elf`) loaded for a core of ``sizes``
    (default the full core); an ELF the core refuses is a MergeError."""
    from common.inputs import InputTooLarge, read_bounded
    from cpu.elf import ELF_LIMIT_WHAT, MAX_ELF_BYTES
    from cpu.emulator import ElfError
    from cpu.rv32.build import FULL
    from cpu.rv32.loader import CoreLoadError, load_program
    sizes = sizes or FULL
    with tempfile.TemporaryDirectory(prefix="deltachip-fw-") as tmp:
        name, elf = firmware_elf(spec, Path(tmp))
        try:
            image = load_program(elf, None, sizes)      # reads the ELF with its bound
            data = read_bounded(elf, MAX_ELF_BYTES, ELF_LIMIT_WHAT)
        except (ElfError, CoreLoadError, InputTooLarge) as e:
            raise MergeError(f"--firmware {spec}: {e}") from None
        except OSError as e:
            raise MergeError(f"--firmware {spec}: cannot read: {e.strerror or e}") from None
    return Firmware(name, Path(spec) if Path(spec).is_file() else elf, hashlib.sha256(data)
                    .hexdigest(), image.images, image.machine.pc, sizes,
                    tool=declared_tool(name))


def load_firmwares(specs: list[str], sizes: Any = None) -> list[Firmware]:
    """:func:`load_firmware` of each spec (``--firmware`` given once or more): a MergeError
    when two programs answer the same tool (a call could not name one of them)."""
    fws = [load_firmware(s, sizes) for s in specs]
    seen: dict[str, str] = {}
    for spec, fw in zip(specs, fws):
        if fw.tool_name in seen:
            raise MergeError(f"--firmware {spec}: answers the tool {fw.tool_name!r}, as "
                             f"--firmware {seen[fw.tool_name]} does: give each tool once")
        seen[fw.tool_name] = spec
    return fws


def core_target(base_config: dict[str, Any], config_path: Path) -> str:
    """The core's target for a base: ``qwen3.5-4b`` when the base has its GDN heads and
    MLP width, else the base's config.json."""
    from backends.chipdir.target import QWEN35_4B, target_from_config
    t = target_from_config(base_config, str(config_path), config_path.name)
    same = all(getattr(t, k) == getattr(QWEN35_4B, k)
               for k in ("d_k", "d_v", "v_per_k", "k_heads", "mlp_width", "conv_kernel",
                         "rms_eps"))
    return QWEN35_4B.name if same else str(config_path)


def core_for(fw: Firmware, target: str, dtype: str,
             progress: Callable[[str], None] | None = None,
             approve: Callable[[Emission], None] | None = None,
             text: list[bytes] | None = None) -> Path:
    """The compiled core of ``fw.sizes`` for ``target``/``dtype`` from the core cache
    (compiled now when absent, ``approve`` called with its plan before its weights are
    built); records the entry in ``fw.core``. ``text``: a base's text vocabulary (each id's
    bytes), which the core then reads as Text tokens, its bytes baked into the core's
    table ROMs (docs/cpu.md, "Text input"; ``fw.sizes`` then has its text ids)."""
    from cpu.rv32.build import MAX_TEXT_IDS, core_hash, with_text_ids
    from cpu.rv32.engines import compiled_core, compiled_core_path
    from cpu.rv32.loader import text_tables
    tables = None
    if text is not None and len(text) <= MAX_TEXT_IDS:
        fw.sizes = with_text_ids(fw.sizes, len(text))
        tables = text_tables(text)
    where = compiled_core_path(fw.sizes, target, dtype, tables)
    if not (where / "chip.json").is_file() and progress:
        progress(f"compiling the core for {target} ({dtype}) into {where} (first time only: "
                 "minutes)")
    path = compiled_core(fw.sizes, target, dtype, progress=progress, approve=approve,
                         tables=tables)
    fw.core = {"name": "rv32", "core_hash": core_hash(fw.sizes), "sizes": fw.sizes.name,
               "target": target, "cache_entry": path.name}
    return path
