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
protocol's. :func:`keyboard_report`, :func:`mouse_report`,
:func:`tablet_report` and :func:`consumer_report` are whole devices' (qemu's
usb-kbd, usb-mouse and usb-tablet, and a media key device), and
:func:`keyboard_input`, :func:`mouse_input`, :func:`tablet_input` and
:func:`consumer_input` make their input reports.
"""

import struct
from typing import Dict, Iterable, List, Sequence

__all__ = [
    "device", "configuration", "interface", "endpoint", "hid", "string", "descriptors_file",
    "TRANSFER_TYPES", "hid_item", "usage_page", "usage", "usage_minimum", "usage_maximum",
    "logical_minimum", "logical_maximum", "report_size", "report_count", "report_id",
    "physical_minimum", "physical_maximum", "unit_exponent", "unit",
    "input", "output", "feature", "collection", "hid_report", "BOOT_KEYBOARD_REPORT",
    "BOOT_MOUSE_REPORT", "vendor_report", "keyboard_report", "mouse_report", "tablet_report",
    "consumer_report", "keyboard_input", "mouse_input", "tablet_input", "consumer_input",
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


def cdc_acm(control: int = 0, data: int = 1, *, notify_ep: int = 0x83, in_ep: int = 0x81,
            out_ep: int = 0x02, max_packet_size: int = 64, capabilities: int = 0x06,
            protocol: int = 1) -> bytes:
    """A CDC ACM function (what cdc_acm binds, a ``/dev/ttyACMN``): the
    communication interface ``control`` (class 2, subclass 2, AT commands
    ``protocol``) with its header, call management, ACM (``capabilities``:
    0x02 line coding, 0x04 break) and union descriptors and its interrupt
    notification endpoint, then the data interface ``data`` (class 0x0a)
    with a bulk endpoint each way. Pass it to :func:`configuration`."""
    functional = (
        struct.pack("<BBBH", 5, 0x24, 0x00, 0x0110)          # header, CDC 1.10
        + struct.pack("<BBBBB", 5, 0x24, 0x01, 0x00, data)   # call management
        + struct.pack("<BBBB", 4, 0x24, 0x02, capabilities)  # ACM
        + struct.pack("<BBBBB", 5, 0x24, 0x06, control, data)  # union
    )
    comm = interface(control, [endpoint(notify_ep, "interrupt", 10, interval=9 if max_packet_size > 64 else 16)],
                     cls=2, subclass=2, protocol=protocol, extra=functional)
    bulk = interface(data, [endpoint(in_ep, "bulk", max_packet_size), endpoint(out_ep, "bulk", max_packet_size)],
                     cls=0x0A)
    return comm + bulk


#: FTDI chips :func:`ftdi` lays out: (product ID, bcdDevice, interfaces,
#: bulk packet size, bcdUSB).
FTDI_CHIPS = {
    "FT232B": (0x6001, 0x0400, 1, 64, 0x0200),
    "FT232R": (0x6001, 0x0600, 1, 64, 0x0200),
    "FT-X": (0x6015, 0x1000, 1, 64, 0x0200),
    "FT2232C": (0x6010, 0x0500, 2, 64, 0x0200),
    "FT232H": (0x6014, 0x0900, 1, 512, 0x0200),
    "FT2232H": (0x6010, 0x0700, 2, 512, 0x0200),
    "FT4232H": (0x6011, 0x0800, 4, 512, 0x0200),
}


def ftdi(chip: str = "FT232R", *, manufacturer: int = 1, product: int = 2, serial: int = 3) -> bytes:
    """A whole FTDI USB serial adapter (what ftdi_sio binds, a
    ``/dev/ttyUSBN`` per interface) as :func:`descriptors_file` lays it out:
    FTDI's vendor ID, the chip's product ID and ``bcdDevice`` (which is how
    ftdi_sio tells the chips apart; see :data:`FTDI_CHIPS`), and per port a
    vendor-specific interface with bulk IN endpoint ``0x81 + 2n`` and bulk
    OUT endpoint ``0x02 + 2n``."""
    try:
        pid, bcd, ports, mps, bcd_usb = FTDI_CHIPS[chip]
    except KeyError:
        raise ValueError("chip must be one of %s" % ", ".join(FTDI_CHIPS)) from None
    ifaces = [interface(n, [endpoint(0x81 + 2 * n, "bulk", mps), endpoint(0x02 + 2 * n, "bulk", mps)],
                        cls=0xFF, subclass=0xFF, protocol=0xFF, string=product)
              for n in range(ports)]
    return descriptors_file(
        device(0x0403, pid, bcd_usb=bcd_usb, max_packet_size0=8 if mps == 64 else 64, bcd_device=bcd,
               manufacturer=manufacturer, product=product, serial=serial),
        configuration(*ifaces, attributes=0xA0, max_power_ma=90),
    )


def configuration(*interfaces: bytes, value: int = 1, attributes: int = 0x80, max_power_ma: int = 100,
                  string: int = 0) -> bytes:
    """A whole configuration: its descriptor, then the interfaces (each from
    :func:`interface`, or several from :func:`cdc_acm`). ``bNumInterfaces``
    counts the distinct interface numbers."""
    body = b"".join(interfaces)
    numbers, at = set(), 0
    while at + 2 <= len(body) and body[at] >= 2:
        if body[at + 1] == 4 and at + 3 <= len(body):
            numbers.add(body[at + 2])
        at += body[at]
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


#: Silicon Labs parts :func:`cp210x` lays out: (product ID, interfaces,
#: bcdUSB, the part number GET_PARTNUM answers, product string). Every port
#: has a bulk IN and OUT endpoint of 64 bytes; bcdDevice is 0x0100.
CP210X_PARTS = {
    "CP2101": (0xEA60, 1, 0x0110, 0x01, "CP2101 USB to UART Bridge Controller"),
    "CP2102": (0xEA60, 1, 0x0110, 0x02, "CP2102 USB to UART Bridge Controller"),
    "CP2103": (0xEA60, 1, 0x0110, 0x03, "CP2103 USB to UART Bridge Controller"),
    "CP2104": (0xEA60, 1, 0x0200, 0x04, "CP2104 USB to UART Bridge Controller"),
    "CP2102N": (0xEA60, 1, 0x0200, 0x20, "CP2102N USB to UART Bridge Controller"),
    "CP2105": (0xEA70, 2, 0x0200, 0x05, "CP2105 Dual USB to UART Bridge Controller"),
    "CP2108": (0xEA71, 4, 0x0200, 0x08, "CP2108 Quad USB to UART Bridge Controller"),
}

def cp210x(part: str = "CP2102", *, manufacturer: int = 1, product: int = 2, serial: int = 3) -> bytes:
    """A whole Silicon Labs USB to UART bridge (what cp210x binds, a
    ``/dev/ttyUSBN`` per interface) as :func:`descriptors_file` lays it out:
    Silicon Labs' vendor ID (0x10c4), the part's factory product ID (0xea60
    for the single-port parts, 0xea70 the CP2105, 0xea71 the CP2108; see
    :data:`CP210X_PARTS`), bcdDevice 1.00, bus powered at 100 mA, and per
    port ``n`` a vendor-specific interface (class 0xff, subclass 0,
    protocol 0) with bulk IN endpoint ``0x81 + n`` and bulk OUT endpoint
    ``0x01 + n`` of 64 bytes, named by the product string (``product``),
    as the single-port parts' default configuration names it. cp210x tells
    the parts apart by what GET_PARTNUM answers
    (:class:`monfs.peer.Cp210xDevice` with the same ``part``), not by
    these."""
    try:
        pid, ports, bcd_usb, _partnum, _name = CP210X_PARTS[part]
    except KeyError:
        raise ValueError("part must be one of %s" % ", ".join(CP210X_PARTS)) from None
    ifaces = [interface(n, [endpoint(0x81 + n, "bulk", 64), endpoint(0x01 + n, "bulk", 64)],
                        cls=0xFF, subclass=0, protocol=0, string=product)
              for n in range(ports)]
    return descriptors_file(
        device(0x10C4, pid, bcd_usb=bcd_usb, max_packet_size0=64, bcd_device=0x0100,
               manufacturer=manufacturer, product=product, serial=serial),
        configuration(*ifaces, attributes=0x80, max_power_ma=100),
    )


#: WCH chips :func:`ch341` lays out: (vendor ID, product ID, bcdDevice,
#: product string).
CH341_CHIPS = {
    "CH340": (0x1A86, 0x7523, 0x0254, "USB Serial"),
    "CH341A": (0x1A86, 0x5523, 0x0304, "USB2.0-Ser!"),
}


def ch341(chip: str = "CH340", *, product: int = 2) -> bytes:
    """A whole WCH CH340 or CH341A USB serial adapter (what ch341 binds, a
    ``/dev/ttyUSB0``) as :func:`descriptors_file` lays it out, as the chips
    describe themselves: a full-speed device (bcdUSB 1.10) of the vendor
    class with an 8-byte ep0, no manufacturer or serial string, bus powered
    at 98 mA, and one vendor-specific interface (class 0xff, subclass 1,
    protocol 2) with bulk IN 0x82 and bulk OUT 0x02 of 32 bytes and the
    interrupt IN 0x81 of 8 bytes (interval 1) that carries the modem
    status. See :data:`CH341_CHIPS`; :class:`monfs.peer.Ch341Device`
    answers it."""
    try:
        vid, pid, bcd, _name = CH341_CHIPS[chip]
    except KeyError:
        raise ValueError("chip must be one of %s" % ", ".join(CH341_CHIPS)) from None
    eps = [endpoint(0x82, "bulk", 32), endpoint(0x02, "bulk", 32), endpoint(0x81, "interrupt", 8, interval=1)]
    return descriptors_file(
        device(vid, pid, bcd_usb=0x0110, device_class=0xFF, max_packet_size0=8, bcd_device=bcd,
               product=product),
        configuration(interface(0, eps, cls=0xFF, subclass=1, protocol=2), attributes=0x80, max_power_ma=98),
    )


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


def physical_minimum(v: int) -> bytes:
    """Physical Minimum (global, signed)."""
    return hid_item(1, 0x3, _signed(v) or b"\0")


def physical_maximum(v: int) -> bytes:
    """Physical Maximum (global, signed); with Physical Minimum 0 and
    Maximum 0, the physical range is the logical one."""
    return hid_item(1, 0x4, _signed(v) or b"\0")


def unit_exponent(e: int) -> bytes:
    """Unit Exponent (global): the power of ten of the physical unit, -8
    to 7 (a nibble)."""
    if not -8 <= e <= 7:
        raise ValueError("a unit exponent is -8 to 7")
    return hid_item(1, 0x5, bytes([e & 0xF]))


def unit(u: int) -> bytes:
    """Unit (global): the system and the exponents of length, mass, time
    ... by nibble (HID 1.11 section 6.2.2.7): 0x11 centimetres, 0x13
    inches, 0x14 degrees, 0 none."""
    return hid_item(1, 0x6, _unsigned(u) or b"\0")


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


def keyboard_report() -> bytes:
    """qemu's usb-kbd report descriptor (63 bytes): a boot keyboard with 8
    modifier bits, a reserved byte, 5 LED outputs (Num, Caps, Scroll
    Lock, Compose, Kana) and 3 bits of padding, and a 6-key array of
    usages 0 to 255. Its key array's Logical Maximum is the one byte 0xff,
    as qemu writes it: the kernel reads it unsigned (255) since the
    minimum is 0. :func:`keyboard_input` makes its reports."""
    return hid_report(
        usage_page(1), usage(6),
        collection(1,
                   report_size(1), report_count(8), usage_page(7), usage_minimum(0xE0),
                   usage_maximum(0xE7), logical_minimum(0), logical_maximum(1), input(0x02),
                   report_count(1), report_size(8), input(0x01),
                   report_count(5), report_size(1), usage_page(8), usage_minimum(1), usage_maximum(5),
                   output(0x02),
                   report_count(1), report_size(3), output(0x01),
                   report_count(6), report_size(8), logical_minimum(0), hid_item(1, 0x2, b"\xff"),
                   usage_page(7), usage_minimum(0), usage_maximum(0xFF), input(0x00)),
    )


def _buttons(buttons: int) -> List[bytes]:
    if not 1 <= buttons <= 32:
        raise ValueError("a mouse has 1 to 32 buttons")
    items = [usage_page(9), usage_minimum(1), usage_maximum(buttons), logical_minimum(0), logical_maximum(1),
             report_count(buttons), report_size(1), input(0x02)]
    if buttons % 8:
        items += [report_count(1), report_size(8 - buttons % 8), input(0x01)]
    return items


def mouse_report(buttons: int = 5, wheel: bool = True) -> bytes:
    """A relative mouse's report descriptor, qemu's usb-mouse for the
    defaults (52 bytes, five buttons): ``buttons`` button bits padded to whole bytes,
    then X, Y and, with ``wheel``, the wheel, each a signed byte of
    motion (-127 to 127). :func:`mouse_input` makes its reports."""
    axes = [usage(0x30), usage(0x31)] + ([usage(0x38)] if wheel else [])
    return hid_report(
        usage_page(1), usage(2),
        collection(1,
                   usage(1),
                   collection(0, *_buttons(buttons),
                              usage_page(1), *axes, logical_minimum(-127), logical_maximum(127),
                              report_size(8), report_count(len(axes)), input(0x06))),
    )


def tablet_report() -> bytes:
    """qemu's usb-tablet report descriptor (74 bytes): 3 buttons, absolute
    X and Y of 16 bits each (0 to 0x7fff) and a relative wheel (a signed
    byte). :func:`tablet_input` makes its reports."""
    return hid_report(
        usage_page(1), usage(2),
        collection(1,
                   usage(1),
                   collection(0, *_buttons(3),
                              usage_page(1), usage(0x30), usage(0x31), logical_minimum(0),
                              logical_maximum(0x7FFF), physical_minimum(0), physical_maximum(0x7FFF),
                              report_size(16), report_count(2), input(0x02),
                              usage_page(1), usage(0x38), logical_minimum(-127), logical_maximum(127),
                              physical_minimum(0), physical_maximum(0), report_size(8), report_count(1),
                              input(0x06))),
    )


def consumer_report(report_id: int = 0) -> bytes:
    """A media key device's report descriptor: a Consumer Control
    application (usage page 0x0c) whose input report is one 16-bit usage,
    0 to 0x3ff (0xe9 Volume Increment, 0xea Volume Decrement, 0xe2 Mute,
    0xcd Play/Pause, 0 none), numbered ``report_id`` unless 0.
    :func:`consumer_input` makes its reports."""
    rid = [hid_item(1, 0x8, _unsigned(report_id))] if report_id else []
    return hid_report(
        usage_page(0x0C), usage(1),
        collection(1, *rid,
                   logical_minimum(0), logical_maximum(0x3FF), usage_minimum(0), usage_maximum(0x3FF),
                   report_size(16), report_count(1), input(0x00)),
    )


def keyboard_input(modifiers: int = 0, keys: Sequence[int] = ()) -> bytes:
    """A boot keyboard's input report (8 bytes): the modifier bits (0x01
    left Ctrl, 0x02 left Shift, 0x04 left Alt, 0x08 left GUI, 0x10 to 0x80
    the right ones), a reserved byte, and up to 6 key usages (0x04 a ...
    0x1d z, 0x1e 1 ... 0x27 0, 0x28 Enter, 0x2c Space). More than 6 keys
    is the rollover error a keyboard sends then: six 0x01."""
    if not 0 <= modifiers <= 0xFF or any(not 0 <= k <= 0xFF for k in keys):
        raise ValueError("modifiers and key usages are bytes")
    array = bytes([0x01] * 6) if len(keys) > 6 else bytes(keys) + bytes(6 - len(keys))
    return bytes([modifiers, 0]) + array


def _motion(v: int) -> int:
    if not -127 <= v <= 127:
        raise ValueError("a motion is -127 to 127")
    return v & 0xFF


def mouse_input(buttons: int = 0, dx: int = 0, dy: int = 0, wheel: int = 0) -> bytes:
    """An input report of :func:`mouse_report`'s default layout (4
    bytes): the button bits (0x01 left, 0x02 right, 0x04 middle), then X,
    Y and wheel motion (-127 to 127; Y grows downwards, the wheel upwards).
    Without a wheel, the report is the first 3 bytes."""
    if not 0 <= buttons <= 0xFF:
        raise ValueError("buttons are a byte of bits")
    return bytes([buttons, _motion(dx), _motion(dy), _motion(wheel)])


def tablet_input(buttons: int = 0, x: int = 0, y: int = 0, wheel: int = 0) -> bytes:
    """An input report of :func:`tablet_report` (6 bytes): the button
    bits, absolute X and Y (0 to 0x7fff, little-endian) and wheel motion."""
    if not 0 <= buttons <= 0xFF:
        raise ValueError("buttons are a byte of bits")
    if not (0 <= x <= 0x7FFF and 0 <= y <= 0x7FFF):
        raise ValueError("a position is 0 to 0x7fff")
    return struct.pack("<BHHB", buttons, x, y, _motion(wheel))


def consumer_input(code: int = 0, report_id: int = 0) -> bytes:
    """An input report of :func:`consumer_report`: the usage pressed (0:
    released), 2 bytes little-endian, after the report ID when not 0.
    For :meth:`monfs.peer.HidDevice.send_report`, which adds the ID
    itself, give ``report_id`` 0."""
    if not 0 <= code <= 0x3FF:
        raise ValueError("a consumer usage here is 0 to 0x3ff")
    return (bytes([report_id]) if report_id else b"") + struct.pack("<H", code)
