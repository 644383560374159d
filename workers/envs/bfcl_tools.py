"""What BFCL's handlers show a model of a BFCL function doc: its tool schema, and
ground-truth calls in the form BFCL's decoder reads (every argument named).

`bfcl_tool` is BFCL's `convert_to_tool` for its OpenAI function-calling handler
(`ModelStyle.OPENAI_COMPLETIONS`), reproduced rule for rule so that the heavy
`bfcl_eval.model_handler` package is not needed at run time;
tests/workers/envs/test_bfcl_agreement.py checks it against the real one on every task.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
from typing import Any

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

_OPENAPI_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _openai_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON Schema: dict->object, float->number, tuple->array."""
    if isinstance(schema, list):
        return [_openai_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value != "any":  # JSON Schema has no "any": no type means any
                out[key] = _OPENAPI_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _openai_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[key] = _openai_schema(value)
        else:
            out[key] = copy.deepcopy(value)  # descriptions, enums, defaults: data, not schema
    return out


def json_schema_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A doc as a plain JSON-schema tool (the `json_schema_tools` option)."""
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc["description"],
            "parameters": _openai_schema(doc["parameters"]),
        },
    }


def _bfcl_cast_types(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's `_cast_to_openai_type` with `GORILLA_TO_OPENAPI`, rule for rule: a float
    is a number with format float and a description suffix, an unknown or missing type
    is a string, and nested objects and item types are cast the same way."""
    mapping = GORILLA_TO_OPENAPI
    for value in properties.values():
        if "type" not in value:
            value["type"] = "string"
        else:
            var_type = value["type"]
            if var_type == "float":
                value["format"] = "float"
                value["description"] += " This is a float type value."
            value["type"] = mapping.get(var_type, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _bfcl_cast_types(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = mapping[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = mapping[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _bfcl_cast_types(items["properties"])
    return properties


def bfcl_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A doc as BFCL's OpenAI function-calling handler sends it (`convert_to_tool` for
    `ModelStyle.OPENAI_COMPLETIONS`): the doc itself, its parameters cast, its
    `response` schema kept, wrapped as a function tool."""
    item = copy.deepcopy(doc)
    item["name"] = item["name"].replace(".", "_")
    item["parameters"]["type"] = "object"
    item["parameters"]["properties"] = _bfcl_cast_types(item["parameters"]["properties"])
    return {"type": "function", "function": item}


@functools.cache
def _signature_names(class_name: str) -> dict[str, tuple[str, ...]]:
    """Each public method of a BFCL backend class -> its parameter names, in order."""
    cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
    names = {}
    for name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
        if not name.startswith("_"):
            params = list(inspect.signature(method).parameters)
            names[name] = tuple(p for p in params if p != "self")
    return names


def keyword_call(source: str, involved_classes: list[str] | tuple[str, ...]) -> str:
    """A ground-truth call with its positional arguments named, as BFCL's decoder
    needs them (it drops positional arguments): ``cd('x')`` -> ``cd(folder='x')``."""
    node = ast.parse(source, mode="eval").body
    if not isinstance(node, ast.Call) or not node.args:
        return source
    assert isinstance(node.func, ast.Name), source
    params = next(
        names[node.func.id]
        for cls in involved_classes
        if node.func.id in (names := _signature_names(cls))
    )
    named = [ast.keyword(arg=params[i], value=arg) for i, arg in enumerate(node.args)]
    return ast.unparse(ast.Call(func=node.func, args=[], keywords=[*named, *node.keywords]))
