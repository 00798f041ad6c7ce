"""The reference simulator: golden step semantics for circuits, fast evaluation of modules.

Takes: IR from :mod:`hdl.ir` (built by ``hdl.frontend`` or by hand). Gives:

- :class:`Simulator` / :class:`StepResult` - run a top circuit token by token;
- :func:`evaluate_module` / :func:`evaluate_module_batch` - evaluate a combinational module;
- :func:`format_token` / :func:`parse_token` - the ``Kind f=1 g=2`` token text;
- :func:`load_image` - ``.hex`` / ``.bin`` memory images;
- :mod:`hdl.sim.waveform` - a GTKWave (VCD) waveform of a run (``Waveform``, ``write_vcd``).

The IR is compiled once to C (cffi) or to Python source; see :mod:`hdl.sim.codegen`.
"""
from hdl.images import ImageError, load_image, load_rom_specs
from hdl.sim.modules import (ModuleEvaluator, evaluate_module, evaluate_module_batch,
                             to_signed)
from hdl.sim.simulator import BACKENDS, SimError, Simulator, StepResult
from hdl.sim.tokens import TokenSyntaxError, format_token, parse_token

__all__ = ["BACKENDS", "ImageError", "ModuleEvaluator", "SimError", "Simulator", "StepResult",
           "TokenSyntaxError", "evaluate_module", "evaluate_module_batch", "format_token",
           "load_image", "load_rom_specs", "parse_token", "to_signed"]
