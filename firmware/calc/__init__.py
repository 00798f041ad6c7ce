"""deltachip firmware: calc (data files; see docs/firmware.md).

``TOOL``: the tool calc answers inside a merged model (``deltachip merge --firmware calc``),
as a chat template is told about it (an OpenAI-style function declaration): its name is
the one calls give (``{"name": "calc", "arguments": {"expression": "..."}}`` or
``<function=calc><parameter=expression>...``), its one parameter the text calc reads."""

TOOL = {"type": "function", "function": {
    "name": "calc",
    "description": "Exact arithmetic on integers and fractions of any size, computed by a "
                   "RISC-V computer inside the model: + - * / // % ** gcd(a, b) and "
                   "parentheses, e.g. 2**100 or (1/3 + 1/6) * 7.",
    "parameters": {"type": "object", "properties": {"expression": {
        "type": "string", "description": "the expression, e.g. 2**100"}},
        "required": ["expression"]}}}
