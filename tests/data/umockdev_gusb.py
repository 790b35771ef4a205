"""A GUsb program (gir1.2-gusb-1.0, as libfprint reaches its devices): finds
the recorded device (examples/pytest/umockdev) by its ids, opens it, prints
where it is, and sends the recording's vendor control request (its answer's
length: the bytes do not come back through GObject introspection)."""

import gi

gi.require_version("GUsb", "1.0")
from gi.repository import GUsb  # noqa: E402

ctx = GUsb.Context.new()
d = ctx.find_by_vid_pid(0x1234, 0x5679)
d.open()
print(d.get_bus(), d.get_address(), "%04x:%04x" % (d.get_vid(), d.get_pid()), d.get_platform_id())
ok, n = d.control_transfer(GUsb.DeviceDirection.DEVICE_TO_HOST, GUsb.DeviceRequestType.VENDOR,
                           GUsb.DeviceRecipient.DEVICE, 1, 0, 0, bytearray(16), 1000, None)
print("control", ok, n)
d.close()
