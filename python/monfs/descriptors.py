"""USB descriptor builders, for ``kind: descriptors`` and ``kind: external``
devices.

The ``descriptors`` file monfs reads is a copy of sysfs's: the 18-byte device
descriptor, then each configuration's ``wTotalLength`` bytes.
:func:`descriptors_file` makes one from the pieces::

    from monfs import descriptors as d
    dump = d.descriptors_file(
        d.device(0x1234, 0x5678, manufacturer=1, product=2),
        d.configuration(
            d.interface(0, [d.endpoint(0x81, "interrupt", 8, interval=10)],
                        cls=3, subclass=1, protocol=1, extra=d.hid(len(d.BOOT_KEYBOARD_REPORT))),
        ),
    )

Counts and lengths (``bNumEndpoints``, ``bNumInterfaces``, ``wTotalLength``)
are computed. The HID report helpers encode short items
(``usage_page(1) + usage(6) + collection(1, ...)``), and
:data:`BOOT_KEYBOARD_REPORT` and :data:`BOOT_MOUSE_REPORT` are the boot
protocol's.
"""

import struct
from typing import Dict, Iterable, Sequence

__all__ = [
    "device", "configuration", "interface", "endpoint", "hid", "string", "descriptors_file",
    "TRANSFER_TYPES", "hid_item", "usage_page", "usage", "usage_minimum", "usage_maximum",
    "logical_minimum", "logical_maximum", "report_size", "report_count", "report_id",
    "input", "output", "feature", "collection", "hid_report", "BOOT_KEYBOARD_REPORT",
    "BOOT_MOUSE_REPORT", "vendor_report",
]

#: ``bmAttributes`` transfer type of an endpoint, by name.
TRANSFER_TYPES: Dict[str, int] = {"control": 0, "isochronous": 1, "iso": 1, "bulk": 2, "interrupt": 3}


def device(vendor_id: int, product_id: int, *, bcd_usb: int = 0x0200, device_class: int = 0,
           device_subclass: int = 0, device_protocol: int = 0, max_packet_size0: int = 64,
           bcd_device: int = 0x0100, manufacturer: int = 0, product: int = 0, serial: int = 0,
           num_configurations: int = 1) -> bytes:
    """A device descriptor (18 bytes). ``manufacturer``, ``product`` and
    ``serial`` are string indexes (0: none)."""
    return struct.pack("<BBHBBBBHHHBBBB", 18, 1, bcd_usb, device_class, device_subclass, device_protocol,
                       max_packet_size0, vendor_id, product_id, bcd_device, manufacturer, product, serial,
                       num_configurations)


def endpoint(address: int, transfer: str = "bulk", max_packet_size: int = 64, interval: int = 0,
             attributes: int = 0) -> bytes:
    """An endpoint descriptor (7 bytes): ``address`` with bit 7 for IN
    (``0x81``), ``transfer`` one of :data:`TRANSFER_TYPES`; ``attributes``
    are more ``bmAttributes`` bits (an isochronous endpoint's
    synchronization and usage: ``0x04`` asynchronous)."""
    try:
        attr = TRANSFER_TYPES[transfer]
    except KeyError:
        raise ValueError("transfer must be one of %s" % ", ".join(TRANSFER_TYPES)) from None
    return struct.pack("<BBBBHB", 7, 5, address, attr | attributes, max_packet_size, interval)


def hid(report_length: int, *, bcd_hid: int = 0x0111, country: int = 0) -> bytes:
    """A HID class descriptor (9 bytes) naming one report descriptor of
    ``report_length`` bytes; goes in an interface's ``extra``."""
    return struct.pack("<BBHBBBH", 9, 0x21, bcd_hid, country, 1, 0x22, report_length)


def interface(number: int, endpoints: Sequence[bytes] = (), *, alt: int = 0, cls: int = 0xFF,
              subclass: int = 0, protocol: int = 0, string: int = 0, extra: bytes = b"") -> bytes:
    """An interface descriptor followed by ``extra`` (class descriptors) and
    its endpoint descriptors. ``cls`` 3 is HID, 8 mass storage, 0xff vendor."""
    head = struct.pack("<BBBBBBBBB", 9, 4, number, alt, len(endpoints), cls, subclass, protocol, string)
    return head + extra + b"".join(endpoints)


def configuration(*interfaces: bytes, value: int = 1, attributes: int = 0x80, max_power_ma: int = 100,
                  string: int = 0) -> bytes:
    """A whole configuration: its descriptor, then the interfaces (each from
    :func:`interface`). ``bNumInterfaces`` counts the distinct interface
    numbers."""
    body = b"".join(interfaces)
    numbers = {i[2] for i in interfaces}
    head = struct.pack("<BBHBBBBB", 9, 2, 9 + len(body), len(numbers), value, string, attributes,
                       max_power_ma // 2)
    return head + body


def descriptors_file(device_descriptor: bytes, *configurations: bytes) -> bytes:
    """The sysfs ``descriptors`` layout monfs reads (``descriptors:``)."""
    if len(device_descriptor) != 18:
        raise ValueError("a device descriptor is 18 bytes")
    if device_descriptor[17] != len(configurations):
        device_descriptor = device_descriptor[:17] + bytes([len(configurations)])
    return device_descriptor + b"".join(configurations)


def string(text: str) -> bytes:
    """A string descriptor (UTF-16LE)."""
    b = text.encode("utf-16-le")
    if len(b) > 253:
        raise ValueError("a string descriptor holds at most 126 UTF-16 units")
    return bytes([2 + len(b), 3]) + b


# --- HID report descriptors (short items, HID 1.11 section 6.2.2) ---------

def _unsigned(v: int) -> bytes:
    if v < 0:
        raise ValueError("this item takes an unsigned value")
    if v == 0:
        return b""
    for n in (1, 2, 4):
        if v < 1 << (8 * n):
            return v.to_bytes(n, "little")
    raise ValueError("value %d does not fit 4 bytes" % v)


def _signed(v: int) -> bytes:
    if v == 0:
        return b""
    for n in (1, 2, 4):
        if -(1 << (8 * n - 1)) <= v < 1 << (8 * n - 1):
            return v.to_bytes(n, "little", signed=True)
    raise ValueError("value %d does not fit 4 bytes" % v)


def hid_item(kind: int, tag: int, data: bytes = b"") -> bytes:
    """One short item: ``kind`` 0 main, 1 global, 2 local; ``data`` 0, 1, 2
    or 4 bytes."""
    size = {0: 0, 1: 1, 2: 2, 4: 3}[len(data)]
    return bytes([(tag << 4) | (kind << 2) | size]) + data


def usage_page(page: int) -> bytes:
    """Usage Page (global): 1 Generic Desktop, 7 Keyboard, 8 LEDs, 9 Button."""
    return hid_item(1, 0x0, _unsigned(page) or b"\0")


def usage(u: int) -> bytes:
    """Usage (local)."""
    return hid_item(2, 0x0, _unsigned(u) or b"\0")


def usage_minimum(u: int) -> bytes:
    """Usage Minimum (local)."""
    return hid_item(2, 0x1, _unsigned(u) or b"\0")


def usage_maximum(u: int) -> bytes:
    """Usage Maximum (local)."""
    return hid_item(2, 0x2, _unsigned(u) or b"\0")


def logical_minimum(v: int) -> bytes:
    """Logical Minimum (global, signed)."""
    return hid_item(1, 0x1, _signed(v) or b"\0")


def logical_maximum(v: int) -> bytes:
    """Logical Maximum (global, signed)."""
    return hid_item(1, 0x2, _signed(v) or b"\0")


def report_size(bits: int) -> bytes:
    """Report Size in bits (global)."""
    return hid_item(1, 0x7, _unsigned(bits) or b"\0")


def report_count(n: int) -> bytes:
    """Report Count (global)."""
    return hid_item(1, 0x9, _unsigned(n) or b"\0")


def report_id(n: int) -> bytes:
    """Report ID (global)."""
    return hid_item(1, 0x8, _unsigned(n))


def input(flags: int) -> bytes:  # noqa: A001 - the item's name
    """Input (main): 0x02 data/variable/absolute, 0x01 constant, 0x06 relative."""
    return hid_item(0, 0x8, bytes([flags]))


def output(flags: int) -> bytes:
    """Output (main)."""
    return hid_item(0, 0x9, bytes([flags]))


def feature(flags: int) -> bytes:
    """Feature (main)."""
    return hid_item(0, 0xB, bytes([flags]))


def collection(kind: int, *items: bytes) -> bytes:
    """A collection (0 physical, 1 application, 2 logical) of ``items``, with
    its End Collection."""
    return hid_item(0, 0xA, bytes([kind])) + b"".join(items) + hid_item(0, 0xC)


def hid_report(*items: Iterable[int]) -> bytes:
    """Items joined into one report descriptor."""
    return b"".join(bytes(i) for i in items)


#: The boot keyboard's report descriptor (HID 1.11 appendix B.1): 8
#: modifier bits, a reserved byte, 5 LEDs, 6 key codes (63 bytes).
BOOT_KEYBOARD_REPORT = hid_report(
    usage_page(1), usage(6),
    collection(1,
               usage_page(7), usage_minimum(0xE0), usage_maximum(0xE7), logical_minimum(0),
               logical_maximum(1), report_size(1), report_count(8), input(0x02),
               report_count(1), report_size(8), input(0x01),
               report_count(5), report_size(1), usage_page(8), usage_minimum(1), usage_maximum(5),
               output(0x02),
               report_count(1), report_size(3), output(0x01),
               report_count(6), report_size(8), logical_minimum(0), logical_maximum(0x65),
               usage_page(7), usage_minimum(0), usage_maximum(0x65), input(0x00)),
)

#: The boot mouse's report descriptor (HID 1.11 appendix B.2): 3 buttons,
#: X and Y (50 bytes).
BOOT_MOUSE_REPORT = hid_report(
    usage_page(1), usage(2),
    collection(1,
               usage(1),
               collection(0,
                          usage_page(9), usage_minimum(1), usage_maximum(3), logical_minimum(0),
                          logical_maximum(1), report_count(3), report_size(1), input(0x02),
                          report_count(1), report_size(5), input(0x01),
                          usage_page(1), usage(0x30), usage(0x31), logical_minimum(-127),
                          logical_maximum(127), report_size(8), report_count(2), input(0x06))),
)


def vendor_report(input_id: int = 1, output_id: int = 2, feature_id: int = 3, size: int = 8,
                  page: int = 0xFF00) -> bytes:
    """A vendor-defined device's report descriptor (usage page ``page``, an
    application collection): an input report, an output report and a
    feature report of ``size`` bytes each, numbered ``input_id``,
    ``output_id`` and ``feature_id`` (a report whose ID is 0 is left out:
    numbered and unnumbered reports do not mix). The kind of device FIDO
    keys, UPS and relay boards and firmware updaters present."""
    body = []
    for rid, item, u in ((input_id, input, 1), (output_id, output, 2), (feature_id, feature, 3)):
        if rid:
            body += [report_id(rid), usage(u), logical_minimum(0), logical_maximum(255),
                     report_size(8), report_count(size), item(0x02)]
    return hid_report(usage_page(page), usage(1), collection(1, *body))
