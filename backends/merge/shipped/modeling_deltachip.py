"""A Qwen3.5 text model and a deltachip chip side by side: the routed merge layout.

``deltachip merge`` copies this file into the checkpoint it writes; transformers loads it
with ``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)``. It needs torch
and transformers only (both Qwen3.5 stacks are transformers' own ``Qwen3_5TextModel``).

The vocabulary is the base's (ids ``0 .. chip_token_offset - 1``) followed by the chip's
(``chip_token_offset + id`` for the chip's token ``id``). Every position is routed by its
input id:

- a text id goes through the base's layers only, on the base's residual, with the base's
  cache, exactly as the base model alone would run it; its logits are the base's, the chip's
  columns are ``-inf``;
- a chip id goes through the chip's layers only (its own embedding, residual, cache and
  lm_head), exactly as the chip alone would run it; its logits are the chip's, the base's
  columns are ``-inf`` (so the argmax is the chip's next token).

The base's cache never sees a chip position and the chip's never sees a text position: a
text-only input gives the base's logits bit for bit, and the chip gives what it gives alone
(its memories preloaded from the ROM images stored in the checkpoint). Supported: any mix of
text and chip positions in one row; in a batch, rows that are text or chip together at each
position (a text-only batch with left padding included). Not supported: a batch whose rows
differ in kind at one position, ``inputs_embeds`` with chip positions, ``labels``.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import DynamicCache, GenerationMixin
from transformers.configuration_utils import PreTrainedConfig
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import (Qwen3_5PreTrainedModel,
                                                          Qwen3_5TextModel)


class DeltachipRoutedConfig(PreTrainedConfig):
    """The base's text config, the chip's, and where the chip's ids start."""
    model_type = "qwen3_5_text"     # config.json's (backends/chipdir/merged.py, MODEL_TYPE)
    sub_configs_defaults = {"base_config": Qwen3_5TextConfig, "chip_config": Qwen3_5TextConfig}

    base_config: dict | PreTrainedConfig | None = None
    chip_config: dict | PreTrainedConfig | None = None
    #: the first chip id (the base's vocab_size) and how many chip ids follow
    chip_token_offset: int = 0
    chip_vocab_size: int = 0
    vocab_size: int = 0
    #: chip decoder layers whose GDN state starts from a stored image (``chip.rom_state_L``)
    chip_rom_layers: list | None = None
    #: the base's own tying is ``base_config.tie_word_embeddings``; the merged model ties none
    tie_word_embeddings: bool = False
    #: how the chip's token tables are stored: "plain" (``chip.model.embed_tokens.weight``,
    #: ``chip.lm_head.weight``) or "structured" (:class:`PackedEmbedding`, :class:`KindHead`)
    chip_tables: str = "plain"
    #: the structured tables' sizes: embed_cols, embed_palette, head_kinds, head_rows
    chip_tables_shape: dict | None = None
    #: the chip's layer weights stored as their nonzeros (:class:`SparseLinear`): weight name
    #: (``model.layers.L.….weight``) -> [out_features, in_features, nonzeros]
    chip_sparse: dict | None = None
    #: the tool-call bridge (a merge with the RISC-V core and a program): the ids of
    #: <tool_call>, </tool_call>, <|im_start|>, <think>, </think>, blank text, the tool
    #: turn's text, and the core's token ids (backends/merge/bridge.py); None: no bridge
    chip_bridge: dict | None = None
    #: how many programs the chip holds (a merge with several ``--firmware``): program 0's
    #: images are ``chip.rom_state_L``, program k's ``chip.rom_state_L_pK``; a call runs on
    #: the program whose tool it names (``chip_bridge["tools"]``)
    chip_programs: int = 1


class RoutedCache:
    """The base's cache, the chip's, and the kind of every position consumed (same in every
    row). ``get_seq_length()`` counts all positions, as ``generate()`` expects."""

    is_compileable = False

    def __init__(self, base: DynamicCache, chip: DynamicCache | None = None):
        self.base = base
        self.chip = chip
        self.kinds: list[bool] = []         # True: a chip position
        #: per row, the tool-call bridge's state (:class:`ToolCalls`), made at first use
        self.calls: list[ToolCalls] | None = None

    @property
    def text_positions(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if not k]

    @property
    def is_linear(self) -> list[bool]:
        return self.base.is_linear

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return len(self.kinds)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.base.reorder_cache(beam_idx)
        if self.chip is not None:
            self.chip.reorder_cache(beam_idx)
        self._select_calls(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.base.batch_select_indices(indices)
        if self.chip is not None:
            self.chip.batch_select_indices(indices)
        self._select_calls(indices)

    def _select_calls(self, rows: torch.Tensor) -> None:
        """The rows' tool-call states follow their rows. A parked program is one chip state,
        so it stays with the first row that takes it; the others copy the rest and run
        their next call from the program's start."""
        if self.calls is None:
            return
        taken: set[int] = set()
        out = []
        for i in rows.tolist():
            out.append(self.calls[i] if i not in taken else self.calls[i].fork())
            taken.add(i)
        self.calls = out

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("a routed cache cannot be cropped (its GDN states cannot "
                                  "be rolled back)")


def _as_float(bits: torch.Tensor) -> torch.Tensor:
    """float32 values stored as their int32 bits (loading in any dtype never rounds them)."""
    return bits.view(torch.float32)


def embedding_rows(ids: torch.Tensor, const: torch.Tensor, cols: torch.Tensor,
                   palette: torch.Tensor, codes: torch.Tensor, dtype: torch.dtype
                   ) -> torch.Tensor:
    """The embedding rows of ``ids`` [N] ([N, hidden], ``dtype``): ``const`` (float32 bits
    [hidden]) on every column, then on columns ``cols`` [U] the ``palette`` value (float32
    bits [P]) each id's code names; ``codes`` [vocab, bytes] holds one bit per column when
    the palette has at most 2 values, else one byte. No arithmetic: a gather, so exact."""
    c = codes[ids]
    n = cols.shape[0]
    if palette.shape[0] <= 2:
        j = torch.arange(n, device=c.device)
        idx = (c[:, j // 8] >> (j % 8).to(torch.uint8)) & 1
    else:
        idx = c[:, :n]
    rows = _as_float(const).to(dtype).expand(ids.shape[0], -1).clone()
    rows[:, cols] = _as_float(palette).to(dtype)[idx.long()]
    return rows


def head_rows(kinds: torch.Tensor, basis: torch.Tensor, dtype: torch.dtype, lo: int, hi: int
              ) -> torch.Tensor:
    """lm_head rows ``lo..hi-1`` of one token kind (``kinds`` [K, 3]: first id, payload bits,
    first basis row): its base row plus, for every set bit j of the payload, the bit's delta
    (``basis`` float32 bits [rows, hidden]: per kind the base row then one delta per bit);
    summed in float64, exact (the merge checks every row against the chip's), cast to
    ``dtype``."""
    k = int(torch.searchsorted(kinds[:, 0].contiguous(), torch.tensor(lo), right=True)) - 1
    off, nb, r0 = (int(x) for x in kinds[k])
    assert off <= lo and hi <= off + (1 << nb), (lo, hi)
    b = _as_float(basis[r0:r0 + 1 + nb]).double()
    u = torch.arange(lo - off, hi - off, device=basis.device)
    bits = ((u[:, None] >> torch.arange(nb, device=basis.device)) & 1).double()
    return (b[0] + bits @ b[1:]).to(dtype)


#: lm_head rows expanded per call of :func:`head_rows`
HEAD_CHUNK = 1 << 14


class PackedEmbedding(nn.Module):
    """The chip's token embedding stored as its structure: a constant row (the ballast),
    and on the columns that differ between ids a small palette of values and one code per
    id and column (:func:`embedding_rows`)."""

    def __init__(self, vocab: int, hidden: int, cols: int, palette: int,
                 dtype_of):
        super().__init__()
        nbytes = -(-cols // 8) if palette <= 2 else cols
        self.register_buffer("const", torch.zeros(hidden, dtype=torch.int32))
        self.register_buffer("cols", torch.zeros(cols, dtype=torch.int64))
        self.register_buffer("palette", torch.zeros(palette, dtype=torch.int32))
        self.register_buffer("codes", torch.zeros(vocab, nbytes, dtype=torch.uint8))
        self._dtype_of = dtype_of

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = embedding_rows(flat, self.const, self.cols, self.palette, self.codes,
                              self._dtype_of())
        return rows.view(*ids.shape, rows.shape[-1])


class KindHead(nn.Module):
    """The chip's lm_head stored as its structure: per token kind a base row and one delta
    per payload bit (:func:`head_rows`); the full matrix is expanded once, at the first call
    in a dtype, and the logits are ``F.linear`` of it as with a plain lm_head."""

    def __init__(self, vocab: int, hidden: int, kinds: int, rows: int):
        super().__init__()
        self.vocab = vocab
        self.register_buffer("kinds", torch.zeros(kinds, 3, dtype=torch.int64))
        self.register_buffer("basis", torch.zeros(rows, hidden, dtype=torch.int32))
        self._weight: torch.Tensor | None = None

    def expanded(self, dtype: torch.dtype) -> torch.Tensor:
        w = self._weight
        if w is None or w.dtype != dtype or w.device != self.basis.device:
            w = torch.empty(self.vocab, self.basis.shape[1], dtype=dtype,
                            device=self.basis.device)
            table = self.kinds.tolist()     # ascending ids: a kind ends where the next starts
            ends = [t[0] for t in table[1:]] + [self.vocab]
            for (off, nb, _), end in zip(table, ends):
                end = min(end, off + (1 << nb))     # fewer ids: a bound on its last field
                for lo in range(off, end, HEAD_CHUNK):
                    hi = min(end, lo + HEAD_CHUNK)
                    w[lo:hi] = head_rows(self.kinds, self.basis, dtype, lo, hi)
            self._weight = w
        return w

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden, self.expanded(hidden.dtype))


def sparse_weight(index: torch.Tensor, value: torch.Tensor, shape: tuple[int, int],
                  dtype: torch.dtype) -> torch.Tensor:
    """A weight of ``shape`` (``dtype``) that is zero but at the flat positions ``index``
    [N] (int32), where it holds ``value`` (float32 bits [N]). No arithmetic: a scatter, so
    exact."""
    w = torch.zeros(shape[0] * shape[1], dtype=dtype, device=value.device)
    w[index.long()] = _as_float(value).to(dtype)
    return w.view(shape)


class SparseLinear(nn.Module):
    """A bias-free linear layer whose weight is stored as its nonzeros (a chip's layer is
    almost all zeros: the RISC-V core's 1.58 GB of layer weights hold 650k nonzeros): the
    flat positions and the values (:func:`sparse_weight`), expanded once, at the first call
    in a dtype; then ``F.linear`` as with the plain ``nn.Linear`` it replaces."""

    def __init__(self, in_features: int, out_features: int, nonzeros: int, dtype_of):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("nz_index", torch.zeros(nonzeros, dtype=torch.int32))
        self.register_buffer("nz_value", torch.zeros(nonzeros, dtype=torch.int32))
        self._dtype_of = dtype_of
        self._weight: torch.Tensor | None = None

    @property
    def weight(self) -> torch.Tensor:
        dtype, w = self._dtype_of(), self._weight
        if w is None or w.dtype != dtype or w.device != self.nz_value.device:
            w = self._weight = sparse_weight(self.nz_index, self.nz_value,
                                             (self.out_features, self.in_features), dtype)
        return w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight)


class DeltachipChip(nn.Module):
    """The chip: transformers' Qwen3.5 text model with its own lm_head, and the initial GDN
    state of every layer holding a memory image (fp32 bits stored as int32, so loading in
    another dtype never rounds them)."""

    def __init__(self, config: Qwen3_5TextConfig, rom_layers: list[int],
                 tables: dict | None = None, sparse: dict | None = None, programs: int = 1):
        super().__init__()
        if tables is None:
            self.model = Qwen3_5TextModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        else:       # structured tables: no dense embedding is ever allocated
            small = copy.copy(config)
            small.vocab_size = 1
            self.model = Qwen3_5TextModel(small)
            self.model.embed_tokens = PackedEmbedding(
                config.vocab_size, config.hidden_size, tables["embed_cols"],
                tables["embed_palette"], lambda: self.model.norm.weight.dtype)
            self.lm_head = KindHead(config.vocab_size, config.hidden_size,
                                    tables["head_kinds"], tables["head_rows"])
        # weights stored as their nonzeros: "model.layers.L.….weight" -> [out, in, nonzeros]
        for name, (n_out, n_in, nnz) in (sparse or {}).items():
            parent, attr = name[:-len(".weight")].rsplit(".", 1)
            setattr(self.get_submodule(parent), attr, SparseLinear(
                n_in, n_out, nnz, lambda: self.model.norm.weight.dtype))
        shape = (config.linear_num_value_heads, config.linear_key_head_dim,
                 config.linear_value_head_dim)
        self.rom_layers = list(rom_layers)
        self.programs = programs
        for layer in self.rom_layers:
            self.register_buffer(f"rom_state_{layer}", torch.zeros(shape, dtype=torch.int32))
            for k in range(1, programs):     # the other programs' images
                self.register_buffer(f"rom_state_{layer}_p{k}",
                                     torch.zeros(shape, dtype=torch.int32))

    def new_cache(self, batch: int, program: int = 0) -> DynamicCache:
        """A cache for ``batch`` streams whose GDN layers are started (recurrent kernel from
        the first token) with the memory images loaded: what the chip's engine starts from
        (``program``: which program's images, in a chip that holds several)."""
        suffix = f"_p{program}" if program else ""
        cfg = self.model.config
        dtype, device = self.model.norm.weight.dtype, self.model.norm.weight.device
        cache = DynamicCache(config=cfg)
        nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        conv_dim = 2 * nk * dk + nv * dv
        for li, kind in enumerate(cfg.layer_types):
            if kind != "linear_attention":
                continue
            layer = cache.layers[li]
            layer.lazy_initialization(       # (it allocates the states: filled below)
                conv_states=torch.zeros(batch, conv_dim, cfg.linear_conv_kernel_dim,
                                        dtype=dtype, device=device),
                recurrent_states=torch.zeros(batch, nv, dk, dv, dtype=torch.float32,
                                             device=device),
                conv_kernel_size=cfg.linear_conv_kernel_dim)
            if li in self.rom_layers:
                layer.recurrent_states[0][:] = getattr(
                    self, f"rom_state_{li}{suffix}").view(torch.float32)
            layer.has_previous_state[0] = True
        return cache

    def forward(self, ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        hidden = self.model(input_ids=ids, cache=cache, use_cache=True).last_hidden_state
        return self.lm_head(hidden)


class ToolCalls:
    """One row's tool-call state, following the conversation id by id (:meth:`follow`):
    inside a think block (and whether the turn's had anything but blank text), inside a call
    (and its text ids so far), the calls of the current assistant turn not yet answered; the
    answer's ids still to be given (the tool turn); and a record of every call answered
    (what ``deltachip chat --show-trace`` shows)."""

    def __init__(self):
        self.in_call = False
        self.ids: list[int] = []
        #: the calls closed in this turn and not yet answered (each its text ids)
        self.calls: list[list[int]] = []
        #: inside a think block; the turn's think block held more than blank text
        self.in_think = False
        self.thought = False
        self.pending: list[int] = []
        self.log: list[dict] = []
        #: the program parked between calls (the chip's state, waiting on the UART's input),
        #: or None: the next call runs it from its start; ``parked_more``: the same for a
        #: chip's further programs (program number -> its parked state)
        self.parked = None
        self.parked_more: dict = {}

    def parked_of(self, program: int):
        """Program ``program``'s parked state, or None."""
        return self.parked_more.get(program) if program else self.parked

    def park(self, program: int, parked) -> None:
        if not program:
            self.parked = parked
        elif parked is None:
            self.parked_more.pop(program, None)
        else:
            self.parked_more[program] = parked

    def follow(self, cfg: dict, i: int) -> bool:
        """Follow text id ``i``; True when it closes a call to be answered (``</tool_call>``
        outside a think block: a call written while thinking is reasoning, not run)."""
        think = cfg.get("think") or (None, None)
        if i == cfg.get("turn_start"):          # a new turn: nothing of the last is pending
            self.in_call, self.in_think, self.thought, self.calls = False, False, False, []
        elif self.in_think:
            if i == think[1]:
                self.in_think = False
            elif i not in cfg["_blank"]:
                self.thought = True
        elif i == cfg["call_open"]:
            self.in_call, self.ids = True, []
        elif self.in_call and i == cfg["call_close"]:
            self.in_call = False
            self.calls.append(self.ids)
            return True
        elif self.in_call:
            self.ids.append(i)
        elif i == think[0]:
            self.in_think = True
        return False

    def fork(self) -> "ToolCalls":
        """A copy of this row's state for another row, without the parked program."""
        new = copy.copy(self)
        new.ids, new.calls, new.pending, new.log = (list(self.ids), list(self.calls),
                                                   list(self.pending), list(self.log))
        new.parked, new.parked_more = None, {}
        return new


def bridge_config(cfg: dict) -> dict:
    """The bridge's config with its lookup sets made (``_blank``, ``_long``)."""
    if "_blank" not in cfg:
        cfg = dict(cfg)
        cfg["_blank"] = frozenset(cfg.get("blank") or ())
        cfg["_long"] = {i: (first, n) for i, first, n in cfg.get("long") or ()}
    return cfg


class BridgeEos:
    """generate()'s end-of-sequence criterion, but not on an end-of-sequence id the bridge
    gave: the tool turn's own ``<|im_end|>`` (the bridge owns those positions). Such an id
    follows ``</tool_call>`` or an id that precedes it in a tool turn the bridge gave
    (``after``: those ids); judged on the sequence itself, so beam search's continuations
    are judged as greedy and sampled rows are."""

    def __init__(self, inner, after: set):
        self.inner, self.after = inner, after
        self.eos_token_id = inner.eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        done = self.inner(input_ids, scores, **kwargs)
        if input_ids.shape[1] >= 2:
            prev = input_ids[:, -2].tolist()
            owned = torch.tensor([p in self.after for p in prev], dtype=torch.bool,
                                 device=done.device)
            done = done & ~owned
        return done


class BridgeTables(nn.Module):
    """The bytes of every base text id: ``text_data[text_offsets[i]:text_offsets[i+1]]``."""

    def __init__(self, vocab: int, nbytes: int):
        super().__init__()
        self.register_buffer("text_offsets", torch.zeros(vocab + 1, dtype=torch.int64))
        self.register_buffer("text_data", torch.zeros(nbytes, dtype=torch.uint8))

    def text(self, ids: list[int]) -> bytes:
        o, d = self.text_offsets, self.text_data
        return b"".join(bytes(d[int(o[i]):int(o[i + 1])].tolist()) for i in ids
                        if 0 <= i < o.shape[0] - 1)


#: the longest call read (in text tokens); a longer one is answered with an error
MAX_CALL_TOKENS = 4096
#: the entry-point group under which deltachip offers a faster runner of tool calls
#: (``model -> runner or None``); this file imports nothing of deltachip
RUNNER_ENTRY_POINT = "deltachip.call_runner"


class DeltachipRoutedForCausalLM(Qwen3_5PreTrainedModel, GenerationMixin):
    """The base's ``model`` and ``lm_head`` (names and tensors as in the base checkpoint)
    and the chip under ``chip``; see the module docstring for the routing."""
    config_class = DeltachipRoutedConfig
    config: DeltachipRoutedConfig
    base_model_prefix = "model"
    _no_split_modules = ["Qwen3_5DecoderLayer"]
    # the base's multi-token-prediction head, the lm_head a tied base may also store, and
    # a vision-language base's vision tower
    _keys_to_ignore_on_load_unexpected = [r"^mtp\.", r"^lm_head\.weight$", r"^model\.visual\."]

    def __init__(self, config: DeltachipRoutedConfig):
        super().__init__(config)
        base = config.base_config
        self.model = Qwen3_5TextModel(base)
        self.tied = bool(base.tie_word_embeddings)
        if not self.tied:
            self.lm_head = nn.Linear(base.hidden_size, base.vocab_size, bias=False)
        tables = config.chip_tables_shape if config.chip_tables == "structured" else None
        self.chip = DeltachipChip(config.chip_config, config.chip_rom_layers or [], tables,
                                  config.chip_sparse, config.chip_programs or 1)
        bridge = config.chip_bridge
        if bridge and "text" not in bridge:      # a core that reads bytes: their table
            self.chip.bridge = BridgeTables(config.chip_token_offset, bridge["text_bytes"])
        self._runner = None                 # the fast engine's call runner, when it loads
        #: the ids an end-of-sequence id follows in the tool turns given (:class:`BridgeEos`)
        self._eos_after: set[int] = {bridge["call_close"]} if bridge else set()
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' loader; a vision-language base's text model is stored under
        ``model.language_model.`` (its files are copied as they are) and read as ``model.``,
        as ``Qwen3_5ForCausalLM`` reads it."""
        kwargs.setdefault("key_mapping", {r"^model\.language_model\.": "model."})
        return super().from_pretrained(*args, **kwargs)

    # ---- ids and caches ------------------------------------------------------------------
    @property
    def chip_token_offset(self) -> int:
        return self.config.chip_token_offset

    def new_cache(self, batch: int = 1) -> RoutedCache:
        """An empty routed cache (the chip's part is made at its first position)."""
        return RoutedCache(DynamicCache(config=self.config.base_config))

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        if model_kwargs.get("cache") is None and generation_config.use_cache is not False:
            model_kwargs["cache"] = self.new_cache()
            return
        return super()._prepare_cache_for_generation(generation_config, model_kwargs,
                                                     *args, **kwargs)

    def _base_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.tied:
            return nn.functional.linear(hidden, self.model.embed_tokens.weight)
        return self.lm_head(hidden)

    def _widen(self, base_logits: torch.Tensor) -> torch.Tensor:
        """The base's logits with the chip's columns at -inf."""
        pad = base_logits.new_full((*base_logits.shape[:-1], self.config.chip_vocab_size),
                                   float("-inf"))
        return torch.cat([base_logits, pad], dim=-1)

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, input_ids: torch.LongTensor | None = None,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None,
                cache: RoutedCache | DynamicCache | None = None,
                inputs_embeds: torch.Tensor | None = None,
                labels: torch.LongTensor | None = None,
                use_cache: bool | None = None,
                logits_to_keep: int | torch.Tensor = 0,
                past_key_values: RoutedCache | DynamicCache | None = None,
                **kwargs) -> CausalLMOutputWithPast:
        if labels is not None:
            raise ValueError("the routed deltachip model computes no loss (labels given)")
        cache = cache if cache is not None else past_key_values
        if cache is not None and not isinstance(cache, RoutedCache):
            if cache.get_seq_length() != 0:
                raise ValueError("give the routed model a RoutedCache (model.new_cache()), "
                                 "not a filled cache of another kind")
            cache = RoutedCache(cache)
        keep = use_cache if use_cache is not None else self.config.base_config.use_cache
        off = self.config.chip_token_offset
        chip_here = input_ids is not None and bool((input_ids >= off).any())
        chip_before = cache is not None and any(cache.kinds)
        if not chip_here and not chip_before:
            return self._text(input_ids, attention_mask, position_ids, cache, inputs_embeds,
                              use_cache, keep, logits_to_keep, **kwargs)
        if input_ids is None:
            raise ValueError("inputs_embeds cannot be routed after chip positions: give "
                             "input_ids")
        if cache is None:
            cache = self.new_cache(input_ids.shape[0])
        logits = self._mixed(input_ids, attention_mask, cache)
        if isinstance(logits_to_keep, int):
            logits = logits[:, -logits_to_keep:] if logits_to_keep else logits
        else:
            logits = logits[:, logits_to_keep]
        self._bridge(input_ids, logits, cache)
        return CausalLMOutputWithPast(logits=logits, cache=cache if keep else None)

    def _text(self, input_ids, attention_mask, position_ids, cache, inputs_embeds, use_cache,
              keep, logits_to_keep, **kwargs) -> CausalLMOutputWithPast:
        """Text only, nothing of the chip in the cache: the base's own call, unchanged."""
        if cache is None and keep:
            cache = self.new_cache()
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, cache=cache.base if cache else None,
                         inputs_embeds=inputs_embeds, use_cache=use_cache, **kwargs)
        hidden = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self._widen(self._base_logits(hidden))
        if cache is not None:
            n = (input_ids if input_ids is not None else inputs_embeds).shape[1]
            cache.kinds.extend([False] * n)
            self._bridge(input_ids, logits, cache)
        return CausalLMOutputWithPast(logits=logits, cache=cache if keep else None)

    def _mixed(self, ids: torch.Tensor, attention_mask: torch.Tensor | None,
               cache: RoutedCache) -> torch.Tensor:
        """Runs of text positions through the base, runs of chip positions through the chip,
        in order; every row must be text or chip together at each position."""
        off = self.config.chip_token_offset
        is_chip = ids >= off
        if bool((is_chip != is_chip[:1]).any()):
            raise ValueError("rows of a batch must be text or chip positions together: run "
                             "rows that differ one at a time")
        if attention_mask is not None and attention_mask.ndim != 2:
            raise ValueError("after chip positions the attention mask must be 2-D [batch, "
                             "positions]")
        kinds = is_chip[0].tolist()
        B, T = ids.shape
        logits = None
        s = 0
        while s < T:
            e = s
            while e < T and kinds[e] == kinds[s]:
                e += 1
            if kinds[s]:
                if cache.chip is None:
                    cache.chip = self.chip.new_cache(B)
                part = self.chip(ids[:, s:e] - off, cache.chip)
                lo, hi = off, off + self.config.chip_vocab_size
            else:
                part = self._base_run(ids[:, s:e], attention_mask, cache)
                lo, hi = 0, off
            if logits is None:
                logits = part.new_full((B, T, off + self.config.chip_vocab_size),
                                       float("-inf"))
            logits[:, s:e, lo:hi] = part.to(logits.dtype)
            cache.kinds.extend([kinds[s]] * (e - s))
            s = e
        return logits

    def _base_run(self, ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  cache: RoutedCache) -> torch.Tensor:
        """One run of text positions through the base: its mask is the mask's text columns,
        its positions count text positions only."""
        n = ids.shape[1]
        mask = position_ids = None
        if attention_mask is not None:
            past = len(cache.kinds)
            cols = cache.text_positions + list(range(past, past + n))
            mask = attention_mask[:, cols]
            position_ids = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, -n:]
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                         cache=cache.base, use_cache=True)
        return self._base_logits(out.last_hidden_state)

    # ---- the tool-call bridge ------------------------------------------------------------
    def _bridge(self, ids: torch.Tensor | None, logits: torch.Tensor,
                cache: RoutedCache) -> None:
        """Follow each row's text for tool calls (:class:`ToolCalls`). A call that ends at
        the last position (``</tool_call>`` just read, outside a think block) is run by the
        chip, with every other unanswered call of the turn; the answer, the tool turn as the
        base's chat template renders it (results in ``<tool_response>``, then the
        generation prompt), is then given one token per position: the logits of a row with
        an answer pending are -inf but at its next id, so greedy and sampled generation both
        take it, and the end-of-sequence criterion does not stop on those ids
        (:class:`BridgeEos`)."""
        cfg = self.config.chip_bridge
        if not cfg or ids is None:
            return
        cfg = self._bridge_cfg
        if cache.calls is None:
            cache.calls = [ToolCalls() for _ in range(ids.shape[0])]
        T = ids.shape[1]
        for b, row in enumerate(ids.tolist()):
            st = cache.calls[b]
            for t, i in enumerate(row):
                if st.pending:
                    if i == st.pending[0]:
                        st.pending.pop(0)
                    else:
                        st.pending = []         # the caller fed something else: drop it
                if st.follow(cfg, i) and t == T - 1 and not st.pending:
                    st.pending = self._answer(st)   # a call in the history is not run again
            if st.pending:
                logits[b, -1] = float("-inf")
                logits[b, -1, st.pending[0]] = 0.0

    @property
    def _bridge_cfg(self) -> dict:
        """The bridge's config, its call budget (``max_tokens``) taken from the generation
        config's ``chip_call_budget`` where that is set."""
        cfg = bridge_config(self.config.chip_bridge)
        budget = getattr(self.generation_config, "chip_call_budget", None)
        if isinstance(budget, int) and budget > 0:
            cfg["max_tokens"] = budget
        return cfg

    def _get_stopping_criteria(self, *args, **kwargs):
        """generate()'s criteria, the end-of-sequence one not stopping on the bridge's ids."""
        from transformers.generation.stopping_criteria import EosTokenCriteria
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        if self.config.chip_bridge:
            for k, c in enumerate(criteria):
                if isinstance(c, EosTokenCriteria):
                    criteria[k] = BridgeEos(c, self._eos_after)
        return criteria

    def _answer(self, st: ToolCalls) -> list[int]:
        """The ids of the tool turn that answers row state ``st``'s unanswered calls: the
        ids themselves go to a core that reads text tokens (``chip_bridge.text``), their
        bytes to one that reads bytes."""
        cfg = self._bridge_cfg
        calls, st.calls = st.calls, []
        if "text" in cfg:
            texts = [(lambda c=c: list(c)) for c in calls]
        else:
            texts = [(lambda c=c: self.chip.bridge.text(c)) for c in calls]
        ids = answer_calls(self._chip_runner, cfg, texts, [len(c) for c in calls], st,
                           self._tokenize, self._decode if "text" in cfg else None)
        eos = set(self.generation_config.eos_token_id
                  if isinstance(self.generation_config.eos_token_id, list)
                  else [self.generation_config.eos_token_id])
        self._eos_after.update(p for p, i in zip(ids, ids[1:]) if i in eos)
        return ids

    def _run_call(self, text: bytes | list[int], st: ToolCalls) -> tuple[bytes, dict]:
        """:func:`call_output` on this model's runner (:meth:`_chip_runner`)."""
        return call_output(self._chip_runner(), self._bridge_cfg, text, st)

    def _tokenize(self, text: str) -> list[int]:
        """``text`` as the merged tokenizer (the base's, with the chip's names) encodes it."""
        if getattr(self, "_tok", None) is None:
            from transformers import AutoTokenizer
            # the model's own config: AutoTokenizer asks nothing about remote code
            self._tok = AutoTokenizer.from_pretrained(self.config._name_or_path,
                                                      config=self.config)
        return self._tok(text, add_special_tokens=False).input_ids

    def _decode(self, ids: list[int]) -> str:
        """Text ids as the merged tokenizer decodes them (a call's text, to route it)."""
        self._tokenize("")
        return self._tok.decode(ids)

    def _chip_runner(self):
        """The runner of tool calls: the one deltachip provides where it is installed (its
        entry point ``deltachip.call_runner``: the fast engine on the same weights,
        bit-identical), else this model's own chip modules (transformers, slow)."""
        if self._runner is None:
            from importlib.metadata import entry_points
            runner = None
            for ep in entry_points(group=RUNNER_ENTRY_POINT):
                runner = ep.load()(self)
                break
            self._runner = runner if runner is not None else ModuleChip(self.chip)
        return self._runner


def answer_calls(runner, cfg: dict, texts: list, n_ids: list[int], st: ToolCalls,
                 tokenize, decode=None) -> list[int]:
    """The ids of the tool turn answering calls of ``n_ids`` text ids each, whose text
    ``texts[k]()`` gives (as :func:`run_call` takes it: the ids, or their bytes), for row
    state ``st``: each call's output (:func:`call_output`, on the program whose tool the
    call names where the chip holds several: :func:`call_program`, the call's text as
    ``decode`` gives it from ``texts[k]()``; or an error when the call is too long) in the
    bridge's tool turn (``cfg["turn"]``: thinking or plain form, by whether the turn's
    think block held anything), encoded by ``tokenize``. Each call is recorded in
    ``st.log``."""
    results = []
    tools = cfg.get("tools") or []
    for text, n in zip(texts, n_ids):
        program = 0
        if n > MAX_CALL_TOKENS:
            out, rec = (f"error: the call is longer than {MAX_CALL_TOKENS} tokens".encode(),
                        {"tokens": 0, "instructions": 0, "seconds": 0.0, "engine": None,
                         "resumed": False})
        else:
            call = text()
            if len(tools) > 1:
                said = decode(call) if decode is not None else \
                    bytes(call).decode("utf-8", "replace")
                program = call_program(tools, said)
            out, rec = call_output(runner(), cfg, call, st, program)
        if tools:
            rec["tool"] = tools[program]
        rec.update(call_tokens=n, output=out.decode("utf-8", "replace"))
        st.log.append(rec)
        if out.endswith(b"\n"):
            out = out[:-1]
        results.append(out.decode("utf-8", "replace"))
    before, between, after = cfg["turn"]["thinking" if st.thought else "plain"]
    return tokenize(before + between.join(results) + after)


def call_tool(text: str) -> str | None:
    """The tool a call's text names: the top-level ``"name"`` of its JSON object, or the
    NAME of ``<function=NAME>`` in the XML form; None where it names none."""
    s = text.strip()
    if s.startswith("<function="):
        end = s.find(">")
        return s[10:end].strip() if end > 0 else None
    if not s.startswith("{"):
        return None
    depth, i, key, want = 0, 0, None, False
    while i < len(s):
        c = s[i]
        if c == '"':                    # a string: a key, or the value of "name"
            j, chars = i + 1, []
            while j < len(s) and s[j] != '"':
                if s[j] == "\\" and j + 1 < len(s):
                    j += 1
                chars.append(s[j])
                j += 1
            word = "".join(chars)
            if depth == 1 and want:
                return word
            key = word if depth == 1 else None
            i = j + 1
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == ":" and depth == 1 and key == "name":
            want = True
            i += 1
            continue
        if c not in " \t\r\n":
            want = False
        i += 1
    return None


def call_program(tools: list[str], text: str) -> int:
    """The program a call runs on: the one whose tool (``tools``, in program order) it
    names; the first where it names none of them (which answers it with its own error)."""
    name = call_tool(text)
    return tools.index(name) if name in tools else 0


def call_output(chip, cfg: dict, text: bytes | list[int], st: ToolCalls, program: int = 0
                ) -> tuple[bytes, dict]:
    """What ``program`` prints with ``text`` as its UART input (resumed where row state
    ``st``'s last call to it parked it, else from its start; on ``chip``, a runner of
    :func:`run_call`), with an error line when the run faults or runs out of steps; and the
    run's record (tokens, instructions, seconds, engine, resumed)."""
    import time
    t0 = time.perf_counter()
    # an empty call would end a parked program: it runs on a fresh one (which says so)
    rec = run_call(chip, cfg, text, st.parked_of(program) if text else None, program)
    parked = rec.pop("parked")
    st.park(program, parked)
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    rec["engine"] = chip.name
    out = rec.pop("output")
    if rec["fault"]:
        out += b"\nerror: the computer stopped on a fault\n"
    elif not rec["ended"] and parked is None:
        out += f"\nerror: no answer within {cfg['max_tokens']:,} steps\n".encode()
    return out, rec


class ModuleChip:
    """Runs of the chip on a merged model's own chip modules (transformers), a token at a
    time: the bridge's runner where deltachip's fast engine is not installed."""
    name = "transformers"

    def __init__(self, chip: "DeltachipChip"):
        self.chip = chip

    def new(self, program: int = 0) -> DynamicCache:
        """The state of a new run (the chip's memories from ``program``'s images)."""
        return self.chip.new_cache(1, program)

    def advance(self, state: DynamicCache, first: int, n: int, stop: set[int]) -> list[int]:
        """The chip's ids after feeding ``first``: at most ``n``, ending at one in ``stop``
        (not fed)."""
        device = self.chip.model.norm.weight.device
        out, tok = [], first
        with torch.no_grad():
            for _ in range(n):
                tok = int(self.chip(torch.tensor([[tok]], device=device), state)[0, -1].argmax())
                out.append(tok)
                if tok in stop:
                    break
        return out


class CallFeed:
    """The answers to the core's ``Want(m)`` during one call (docs/cpu.md, "Input"), as
    chip ids. ``call``: the call's text ids, for a core that reads text tokens (Want(1),
    UART_TNEXT: ``Text(next id)``, then ``In(0)`` once the call is read; Want(2), UART_TXT:
    ``Text(the current id)``; Want(0), UART_RX: ``In(0)``), or its bytes, for one that
    reads bytes (Want(0): ``In(next byte)``, then ``In(0)``; the text registers: ``In(0)``).
    :meth:`answer` gives None where the call is read and the program asks for more: the
    next call's Want, where the program parks."""

    def __init__(self, cfg: dict, call: bytes | list[int]):
        self.in0, self.text0 = cfg["in"], cfg.get("text")
        self.ids = None if isinstance(call, (bytes, bytearray)) else \
            split_long(list(call), bridge_config(cfg)["_long"])
        self.data = bytes(call) + b"\0" if self.ids is None else b""
        self.pos, self.tpos, self.read = 0, -1, False

    def answer(self, m: int) -> int | None:
        if self.ids is None:
            if m != 0:
                return self.in0
            if self.pos == len(self.data):
                return None
            self.pos += 1
            return self.in0 + self.data[self.pos - 1]
        if m == 1:
            if self.read:
                return None
            self.tpos += 1
            if self.tpos < len(self.ids):
                return self.text0 + self.ids[self.tpos]
            self.read = True
            return self.in0
        if m == 2 and 0 <= self.tpos < len(self.ids):
            return self.text0 + self.ids[self.tpos]
        return self.in0


def split_long(ids: list[int], long: dict) -> list[int]:
    """``ids`` with each id longer than the core reads followed by its pieces (``long``:
    id -> (first piece, pieces); backends/merge/bridge.py, ``text_pieces``)."""
    out = []
    for i in ids:
        out.append(i)
        if i in long:
            first, n = long[i]
            out += range(first, first + n)
    return out


def run_call(chip, cfg: dict, text: bytes | list[int], parked=None, program: int = 0) -> dict:
    """A run of the core with ``text`` as its UART input (:class:`CallFeed`: text ids or
    bytes), on ``chip`` (``new()`` a run's state, ``advance(state, first, n, stop)`` the
    chip's next ids). ``parked``: (state, m) of a program parked on a ``Want(m)`` by the
    previous call, resumed with this text; None: run from the start token, on ``program``'s
    memory images (``chip.new(program)``; the chip's own for 0). Each Want is
    answered by the feed; a Want it has no answer for parks the program (the call is
    answered, and (state, m) is given back as ``parked``). An Out's byte is printed; End
    ends the run, a Fault marks it. Counts the tokens and the instructions retired
    (executing tokens not followed by a Fault). Gives output, tokens, instructions, fault,
    ended, parked, resumed."""
    want = cfg["want"]
    out0, outn = cfg["out"]
    end0, endn = cfg["end"]
    f0, fn = cfg["fault"]
    ex = cfg["executes"]
    go = 1 << cfg["out_go_bit"]

    def executes(i: int) -> bool:
        return any(a <= i < a + n for a, n in ex) or (out0 <= i < out0 + outn
                                                      and (i - out0) & go != 0)
    stop = set(range(want, want + 4)) | set(range(end0, end0 + endn))
    feed = CallFeed(cfg, text)
    if parked is not None:                  # the parked Want, answered by this call
        state, m = parked
        tok = feed.answer(m)
    else:
        state, tok = (chip.new(program) if program else chip.new()), cfg["start"]
    out = bytearray()
    tokens, instructions, fault, ended = 1, 0, False, False
    prev_exec, park = executes(tok), None
    while tokens < cfg["max_tokens"] and not (ended or park is not None):
        ids = chip.advance(state, tok, min(4096, cfg["max_tokens"] - tokens), stop)
        if not ids:
            break
        for i in ids:
            if want <= i < want + 4:
                a = feed.answer(i - want)
                if a is None:               # the call is read: the program waits for the next
                    park = i - want
                    break
                i = a
            tokens += 1
            is_fault = f0 <= i < f0 + fn
            instructions += prev_exec and not is_fault
            prev_exec = executes(i)
            fault |= is_fault
            if out0 <= i < out0 + outn:
                out.append(((i - out0) >> cfg["out_b_shift"]) & 0xFF)
            tok = i
            if end0 <= i < end0 + endn:
                ended = True
                break
    return {"output": bytes(out), "tokens": tokens, "instructions": instructions,
            "fault": fault, "ended": ended,
            "parked": (state, park) if park is not None and not fault else None,
            "resumed": parked is not None}


__all__ = ["DeltachipRoutedConfig", "DeltachipRoutedForCausalLM", "RoutedCache"]
