"""MicroPython for the deltachip core: the port (this folder) and its build (build.py).

``TOOL``: the tool MicroPython answers inside a merged model (``deltachip merge --firmware
python``; docs/firmware.md, "The python tool"), as a chat template is told about it: calls
``{"name": "python", "arguments": {"code": "..."}}`` or ``<function=python><parameter=code>
...``; the answer is what the code prints (or its traceback). The calls of one
conversation run in one interpreter: a name bound by one call is there in the next."""

TOOL = {"type": "function", "function": {
    "name": "python",
    "description": "Runs Python code on a RISC-V computer inside the model (MicroPython "
                   "1.28: integers of any size, float, str, list, dict, set, classes, "
                   "generators, exceptions, the math module) and "
                   "answers with what it prints (use print), or its traceback. The calls of "
                   "one conversation share their variables, functions and imports. At most "
                   "1023 bytes of code per call.",
    "parameters": {"type": "object", "properties": {"code": {
        "type": "string", "description": "the Python source, e.g. print(2**100)"}},
        "required": ["code"]}}}
