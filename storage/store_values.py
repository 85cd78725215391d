"""How our stores read an item's value back from LangGraph's ``store`` table.

Psycopg decodes the ``value`` column (jsonb) itself; LangGraph then parses again any value
that is not a dict, as if it were JSON text, and a list or a string stored there (written
around the store's API, straight into the table) fails that second parse. The store's whole
read then fails (a listing of the namespace, a GET), so the item could be neither listed as
invalid nor deleted. :func:`load_value` hands such a value over as it is: the memory readers
(memory.user_memory.check_item) then see an item that is not an object and treat it as invalid.
"""

from __future__ import annotations

from typing import Any

import orjson


def load_value(content: Any) -> Any:
    """A stored value that psycopg did not decode to a dict: JSON text is parsed, anything
    already decoded (a list, a string, a number, null) is returned unchanged."""
    if isinstance(content, (bytes, bytearray, memoryview)):
        return orjson.loads(bytes(content))
    return content
