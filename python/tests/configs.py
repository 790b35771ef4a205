"""Configurations the package's tests share."""

#: A keyboard on bus 1, port 1, seeded; the hub polls nothing, so bus 1
#: carries only the keyboard's traffic.
KEYBOARD = {
    "seed": 7,
    "usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [{"port": 1, "kind": "hid-keyboard"}]}]},
}

#: A configured trace event with a number and a string.
TICK = {
    "tracing": {"events": [{"system": "myapp", "name": "tick", "fields": [
        {"name": "count", "type": "u32"}, {"name": "msg", "type": "__data_loc char[]"}]}]},
}
