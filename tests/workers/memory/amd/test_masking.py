from distillery.workers.memory.amd.masking import (
    ELLIPSIS,
    find_values,
    mask_call,
    mask_call_detailed,
    mask_text,
    placeholder_for,
    sanitise_observation,
)

SORT_DOC = {
    "name": "sort",
    "parameters": {
        "type": "dict",
        "properties": {"file_name": {"type": "string", "description": "The file to sort."}},
        "required": ["file_name"],
    },
}
LOCK_DOC = {
    "name": "lockDoors",
    "parameters": {
        "type": "dict",
        "properties": {
            "unlock": {"type": "boolean", "description": "True to unlock."},
            "door": {
                "type": "array",
                "items": {"type": "string"},
                "description": 'Doors. [Enum]: ["driver", "passenger", "rear_left", "rear_right"]',
            },
        },
    },
}
AIRPORT_DOC = {
    "name": "get_nearest_airport_by_city",
    "parameters": {
        "properties": {
            "location": {
                "type": "string",
                "description": "The location. [Enum]: Rivermist, Stonebrook, Maplecrest, "
                "Silverpine, Shadowridge, London, Paris, Sunset Valley, Oakendale",
            }
        }
    },
}


def test_keyword_arguments_are_masked_by_name():
    assert mask_call("cd(folder='document')") == "cd(folder=<DIR_NAME>)"
    assert mask_call("mkdir(dir_name='temp')") == "mkdir(dir_name=<DIR_NAME>)"
    assert (
        mask_call("mv(source='final_report.pdf', destination='temp')")
        == "mv(source=<SOURCE>, destination=<DESTINATION>)"
    )
    assert (
        mask_call("diff(file_name1='final_report.pdf', file_name2='previous_report.pdf')")
        == "diff(file_name1=<FILE_NAME_1>, file_name2=<FILE_NAME_2>)"
    )


def test_placeholder_names():
    assert placeholder_for("file_name") == "<FILE_NAME>"
    assert placeholder_for("folder") == "<DIR_NAME>"
    assert placeholder_for("user_id") == "<USER_ID>"
    assert placeholder_for("tweet_id") == "<TWEET_ID>"
    assert placeholder_for("id") == "<ID>"
    assert placeholder_for("email") == "<EMAIL>"
    assert placeholder_for("price") == "<AMOUNT>"
    assert placeholder_for("fuelAmount") == "<FUEL_AMOUNT>"
    assert placeholder_for("username") == "<USERNAME>"


def test_positional_arguments_take_doc_parameter_names():
    assert mask_call("sort('final_report.pdf')", SORT_DOC) == "sort(<FILE_NAME>)"
    # Without a doc (or past its parameters) they are numbered.
    assert mask_call("sort('final_report.pdf')") == "sort(<ARG_1>)"
    assert mask_call("sort('a.txt', 3)", SORT_DOC) == "sort(<FILE_NAME>, <ARG_2>)"


def test_nested_literals_keep_their_shape():
    masked = mask_call_detailed(
        "post_tweet(content='Budget done', tags=['#budget', '#q3'], mentions=[], "
        "updates={'status': 'open', 'ids': [12, 13]}, n=(1,))"
    )
    assert masked.masked == (
        "post_tweet(content=<CONTENT>, tags=[<TAGS>, <TAGS>], mentions=[], "
        "updates={'status': <STATUS>, 'ids': [<IDS>, <IDS>]}, n=(<N>,))"
    )
    assert masked.values == {
        "Budget done": "<CONTENT>",
        "#budget": "<TAGS>",
        "#q3": "<TAGS>",
        "open": "<STATUS>",
        "12": "<IDS>",
        "13": "<IDS>",
        "1": "<N>",
    }


def test_bools_none_and_small_enums_are_kept():
    assert mask_call("ls(a=True)") == "ls(a=True)"
    assert mask_call("f(x=None, y=False)") == "f(x=None, y=False)"
    assert (
        mask_call("lockDoors(unlock=False, door=['driver', 'passenger'])", LOCK_DOC)
        == "lockDoors(unlock=False, door=['driver', 'passenger'])"
    )
    # A value outside the enum, and any value without a doc, is masked.
    assert mask_call("lockDoors(door=['trunk'])", LOCK_DOC) == "lockDoors(door=[<DOOR>])"
    assert mask_call("lockDoors(door=['driver'])") == "lockDoors(door=[<DOOR>])"
    # A large enum (a city list) is task data, not a mode: masked.
    assert (
        mask_call("get_nearest_airport_by_city(location='Paris')", AIRPORT_DOC)
        == "get_nearest_airport_by_city(location=<LOCATION>)"
    )


def test_an_enum_listed_in_parentheses_is_kept():
    # BFCL's place_order declares its order types in prose: "Type of the order (Buy/Sell)."
    doc = {
        "name": "place_order",
        "parameters": {
            "properties": {
                "order_type": {"type": "string", "description": "Type of the order (Buy/Sell)."},
                "symbol": {"type": "string", "description": "Symbol (e.g. AAPL) to trade."},
            }
        },
    }
    assert (
        mask_call("place_order(order_type='Buy', symbol='AAPL')", doc)
        == "place_order(order_type='Buy', symbol=<SYMBOL>)"
    )
    assert (
        mask_call("place_order(order_type='Short')", doc) == "place_order(order_type=<ORDER_TYPE>)"
    )


def test_numbers_are_masked_and_recorded():
    masked = mask_call_detailed("transfer(amount=-25.5, tweet_id=10)")
    assert masked.masked == "transfer(amount=<AMOUNT>, tweet_id=<TWEET_ID>)"
    assert masked.values == {"-25.5": "<AMOUNT>", "10": "<TWEET_ID>"}


def test_non_literal_source_is_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    source = f"__import__('os').system('touch {marker}')"
    masked = mask_call(source)
    assert not marker.exists()
    assert "touch" not in masked and "os" not in masked
    assert mask_call("f(x=open('/etc/passwd'))") == "f(x=<X>)"
    assert mask_call("not a call") == "not(<ARGS>)"


def test_find_values_and_mask_text():
    values = {
        "final_report.pdf": "<FILE_NAME>",
        "temp": "<DIR_NAME>",
        "..": "<DIR_NAME>",
        "file": "<X>",
        "cd": "<Y>",
    }
    text = "Move Final_Report.pdf into TEMP with cd, not a template; keep <FILE> and <DIR_NAME>."
    assert find_values(text, values) == ["final_report.pdf", "temp"]
    assert find_values(text, values, ignore={"temp"}) == ["final_report.pdf"]
    assert mask_text(text, values) == (
        "Move <FILE_NAME> into <DIR_NAME> with cd, not a template; keep <FILE> and <DIR_NAME>."
    )
    assert find_values("go up with ..", values) == []  # too short to search for


def test_sanitise_observation():
    assert sanitise_observation('{"a":\n\t 1}\x00\x1b  ') == '{"a": 1}'
    assert sanitise_observation(None) == ""
    long = sanitise_observation("word " * 300, limit=500)
    assert len(long) <= 500 and long.endswith(ELLIPSIS)
    assert sanitise_observation("short", limit=500) == "short"
