"""Take the webcam's and the audio device's streaming interfaces from
uvcvideo and snd-usb-audio with pyusb and send them the class requests those
drivers send, as a user-space UVC or UAC program does: the answers are the
ones the drivers get (the audio device's endpoint has no sampling-frequency
control, so its SET_CUR stalls, as qemu's usb-audio's does). Prints one line
per request: its name, then the status (0, or the errno of a stall) and
what came back."""

import errno

import usb.core

cam = usb.core.find(idVendor=0x046D, idProduct=0x0825)
audio = usb.core.find(idVendor=0x46F4, idProduct=0x0002)


def take(dev, intf):
    if dev.is_kernel_driver_active(intf):
        dev.detach_kernel_driver(intf)
    usb.util.claim_interface(dev, intf)


def give_back(name, dev, intf):
    """Attach the kernel's driver again: snd-usb-audio and uvcvideo bind
    the control interface only, so none binds the streaming interface and
    libusb says LIBUSB_ERROR_NOT_FOUND (the CONNECT ioctl gives 0)."""
    try:
        dev.attach_kernel_driver(intf)
        print(name, "attach", 0)
    except usb.core.USBError as e:
        print(name, "attach", -e.errno if e.errno else "error")


def ask(name, dev, rt, req, value, index, data_or_len):
    try:
        got = dev.ctrl_transfer(rt, req, value, index, data_or_len, timeout=1000)
    except usb.core.USBError as e:
        print(name, -e.errno if e.errno else "error")
        return
    if isinstance(got, int):
        print(name, 0, got)
    else:
        print(name, 0, bytes(got).hex())


take(cam, 1)
probe = bytearray(26)
probe[0] = 1
probe[2] = 1
probe[3] = 1
probe[4:8] = (333333).to_bytes(4, "little")
ask("uvc SET_CUR probe", cam, 0x21, 0x01, 0x0100, 1, bytes(probe))
ask("uvc GET_CUR probe", cam, 0xA1, 0x81, 0x0100, 1, 26)
ask("uvc GET_MAX probe", cam, 0xA1, 0x83, 0x0100, 1, 26)
ask("uvc GET_DEF probe", cam, 0xA1, 0x87, 0x0100, 1, 26)
ask("uvc GET_INFO probe", cam, 0xA1, 0x86, 0x0100, 1, 1)
ask("uvc GET_LEN commit", cam, 0xA1, 0x85, 0x0200, 1, 2)
ask("uvc GET_MIN commit", cam, 0xA1, 0x82, 0x0200, 1, 26)
ask("uvc SET_CUR commit", cam, 0x21, 0x01, 0x0200, 1, bytes(probe))
ask("uvc GET_CUR selector 9", cam, 0xA1, 0x81, 0x0900, 1, 4)
cam.set_interface_altsetting(interface=1, alternate_setting=1)
print("uvc alt", cam.ctrl_transfer(0x81, 0x0A, 0, 1, 1)[0])
cam.set_interface_altsetting(interface=1, alternate_setting=0)
usb.util.release_interface(cam, 1)
give_back("uvc", cam, 1)

take(audio, 1)
audio.set_interface_altsetting(interface=1, alternate_setting=1)
ask("uac SET_CUR sampling frequency", audio, 0x22, 0x01, 0x0100, 0x01, b"\x80\xbb\x00")
ask("uac GET_CUR selector 9", audio, 0xA2, 0x81, 0x0900, 0x01, 3)
audio.set_interface_altsetting(interface=1, alternate_setting=0)
usb.util.release_interface(audio, 1)
give_back("uac", audio, 1)
print("attached", errno.EPIPE)
