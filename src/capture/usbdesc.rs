//! A device's descriptors as Linux exposes them in sysfs
//! (`/sys/bus/usb/devices/<dev>/descriptors`): the 18-byte device
//! descriptor, then for each of its `bNumConfigurations` configurations the
//! raw bytes the kernel read from it, `wTotalLength` bytes each (the
//! configuration descriptor followed by its interface, endpoint and class
//! descriptors).
//!
//! [`DescriptorDump::parse`] checks the bytes strictly and keeps them as they
//! are: a device built from a dump answers GET_DESCRIPTOR with exactly these
//! bytes. Every error carries the byte offset of the field that is wrong.

use std::ops::Range;

/// An error in a descriptor dump: what is wrong and at which byte.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {message}")]
pub struct DumpError {
    /// Byte offset in the file of the offending field (the file's length
    /// when bytes are missing at the end).
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

/// One endpoint descriptor, as found in the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpEndpoint {
    /// bEndpointAddress.
    pub addr: u8,
    /// bmAttributes.
    pub attr: u8,
    /// wMaxPacketSize, with its high-bandwidth bits.
    pub mps: u16,
    /// bInterval.
    pub interval: u8,
}

/// One interface descriptor (an alternate setting) and what follows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpInterface {
    /// bInterfaceNumber.
    pub num: u8,
    /// bAlternateSetting.
    pub alt: u8,
    /// bInterfaceClass.
    pub class: u8,
    /// bInterfaceSubClass.
    pub sub: u8,
    /// bInterfaceProtocol.
    pub proto: u8,
    /// iInterface.
    pub i_intf: u8,
    /// Its class-specific descriptors (those between it and its first
    /// endpoint, the kernel's `extra`: a HID descriptor, an audio or video
    /// class header).
    pub extra: Vec<u8>,
    /// Its endpoints, in descriptor order.
    pub eps: Vec<DumpEndpoint>,
}

/// An interface association descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpIad {
    /// bFirstInterface.
    pub first: u8,
    /// bInterfaceCount.
    pub count: u8,
    /// bFunctionClass.
    pub class: u8,
    /// bFunctionSubClass.
    pub sub: u8,
    /// bFunctionProtocol.
    pub proto: u8,
}

/// One configuration of the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpConfig {
    /// Where its `wTotalLength` bytes are in [`DescriptorDump::bytes`].
    pub range: Range<usize>,
    /// bNumInterfaces.
    pub num_interfaces: u8,
    /// bConfigurationValue.
    pub value: u8,
    /// iConfiguration.
    pub i_cfg: u8,
    /// bmAttributes.
    pub attr: u8,
    /// bMaxPower (2 mA units).
    pub max_power: u8,
    /// Interface association descriptors, in order.
    pub iads: Vec<DumpIad>,
    /// Interface descriptors (alternate settings), in descriptor order.
    pub interfaces: Vec<DumpInterface>,
}
/// The largest `descriptors` dump read (a sysfs `descriptors` file is the
/// device descriptor and every configuration's, each at most 65,535 bytes;
/// real ones are a few hundred bytes): 1 MiB.
pub const MAX_DUMP_BYTES: u64 = 1 << 20;

/// A checked sysfs `descriptors` dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorDump {
    /// The file's bytes, unchanged.
    pub bytes: Vec<u8>,
    /// The configurations, in file order (configuration index 0, 1, ...).
    pub configs: Vec<DumpConfig>,
}

fn err<T>(offset: usize, message: impl Into<String>) -> Result<T, DumpError> {
    Err(DumpError {
        offset,
        message: message.into(),
    })
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl DescriptorDump {
    /// The device descriptor (the first 18 bytes).
    pub fn device(&self) -> &[u8] {
        &self.bytes[..18]
    }

    /// bcdUSB of the device descriptor.
    pub fn bcd_usb(&self) -> u16 {
        le16(&self.bytes, 2)
    }

    /// The raw bytes of configuration `index` (GET_DESCRIPTOR(CONFIG, index)).
    pub fn config_bytes(&self, index: usize) -> Option<&[u8]> {
        self.configs
            .get(index)
            .map(|c| &self.bytes[c.range.clone()])
    }

    /// Check a dump; on success the bytes are kept as they are.
    pub fn parse(bytes: Vec<u8>) -> Result<DescriptorDump, DumpError> {
        let b = &bytes;
        if b.len() < 18 {
            return err(
                b.len(),
                format!(
                    "the file is {} bytes, too short for the 18-byte device descriptor",
                    b.len()
                ),
            );
        }
        if b[0] != 18 {
            return err(0, format!("device descriptor bLength is {}, not 18", b[0]));
        }
        if b[1] != 1 {
            return err(
                1,
                format!("bDescriptorType is {:#04x}, not 0x01 (device)", b[1]),
            );
        }
        let bcd = le16(b, 2);
        if bcd >= 0x0300 {
            return err(
                2,
                format!(
                    "bcdUSB {:x}.{:02x}: a SuperSpeed device's descriptors; monfs simulates USB 2.0 buses only",
                    bcd >> 8,
                    bcd & 0xff
                ),
            );
        }
        if ![8, 16, 32, 64].contains(&b[7]) {
            return err(
                7,
                format!("bMaxPacketSize0 is {}, not 8, 16, 32 or 64", b[7]),
            );
        }
        let ncfg = b[17] as usize;
        if ncfg == 0 {
            return err(17, "bNumConfigurations is 0");
        }
        let mut configs = Vec::with_capacity(ncfg);
        let mut at = 18;
        for cfgno in 0..ncfg {
            configs.push(parse_config(b, at, cfgno)?);
            at = configs[cfgno].range.end;
        }
        if at != b.len() {
            return err(
                at,
                format!(
                    "{} bytes follow the last of the {ncfg} configuration(s) (bNumConfigurations is {ncfg})",
                    b.len() - at
                ),
            );
        }
        Ok(DescriptorDump { bytes, configs })
    }
}

fn parse_config(b: &[u8], at: usize, cfgno: usize) -> Result<DumpConfig, DumpError> {
    if b.len() < at + 9 {
        return err(
            b.len(),
            format!(
                "the file ends inside configuration {cfgno}'s 9-byte descriptor (bNumConfigurations is {})",
                b[17]
            ),
        );
    }
    if b[at] != 9 {
        return err(
            at,
            format!("configuration {cfgno}: bLength is {}, not 9", b[at]),
        );
    }
    if b[at + 1] != 2 {
        return err(
            at + 1,
            format!(
                "configuration {cfgno}: bDescriptorType is {:#04x}, not 0x02 (configuration)",
                b[at + 1]
            ),
        );
    }
    let total = le16(b, at + 2) as usize;
    if total < 9 {
        return err(
            at + 2,
            format!("configuration {cfgno}: wTotalLength {total} is less than 9"),
        );
    }
    if at + total > b.len() {
        return err(
            at + 2,
            format!(
                "configuration {cfgno}: wTotalLength {total} runs past the end of the file ({} bytes left)",
                b.len() - at
            ),
        );
    }
    let end = at + total;
    let mut cfg = DumpConfig {
        range: at..end,
        num_interfaces: b[at + 4],
        value: b[at + 5],
        i_cfg: b[at + 6],
        attr: b[at + 7],
        max_power: b[at + 8],
        iads: vec![],
        interfaces: vec![],
    };
    // The interface being filled and the offset of its bNumEndpoints.
    let mut open: Option<usize> = None;
    let check_eps = |cfg: &DumpConfig, open: Option<usize>| -> Result<(), DumpError> {
        if let (Some(i), Some(last)) = (open, cfg.interfaces.last()) {
            if b[i] as usize != last.eps.len() {
                return err(
                    i,
                    format!(
                        "configuration {cfgno} interface {} alternate setting {}: bNumEndpoints is {} but {} endpoint descriptor(s) follow",
                        last.num,
                        last.alt,
                        b[i],
                        last.eps.len()
                    ),
                );
            }
        }
        Ok(())
    };
    let mut p = at + 9;
    while p < end {
        if p + 2 > end {
            return err(
                p,
                format!(
                    "configuration {cfgno}: 1 byte left before wTotalLength ends, too short for a descriptor"
                ),
            );
        }
        let len = b[p] as usize;
        let ty = b[p + 1];
        if len < 2 {
            return err(p, format!("descriptor bLength is {len}, less than 2"));
        }
        if p + len > end {
            return err(
                p,
                format!(
                    "descriptor bLength {len} runs past configuration {cfgno}'s wTotalLength ({} bytes left)",
                    end - p
                ),
            );
        }
        let need = |min: usize, what: &str| -> Result<(), DumpError> {
            if len < min {
                err(
                    p,
                    format!("{what} descriptor bLength is {len}, less than {min}"),
                )
            } else {
                Ok(())
            }
        };
        match ty {
            1 | 2 => {
                return err(
                    p + 1,
                    format!(
                        "a {} descriptor (type {ty:#04x}) inside configuration {cfgno}",
                        if ty == 1 { "device" } else { "configuration" }
                    ),
                );
            }
            4 => {
                need(9, "interface")?;
                check_eps(&cfg, open)?;
                let (num, alt) = (b[p + 2], b[p + 3]);
                if cfg.interfaces.iter().any(|i| i.num == num && i.alt == alt) {
                    return err(
                        p + 3,
                        format!(
                            "configuration {cfgno}: interface {num} alternate setting {alt} appears twice"
                        ),
                    );
                }
                cfg.interfaces.push(DumpInterface {
                    num,
                    alt,
                    class: b[p + 5],
                    sub: b[p + 6],
                    proto: b[p + 7],
                    i_intf: b[p + 8],
                    extra: vec![],
                    eps: vec![],
                });
                open = Some(p + 4);
            }
            5 => {
                need(7, "endpoint")?;
                let Some(intf) = cfg.interfaces.last_mut() else {
                    return err(
                        p,
                        format!(
                            "configuration {cfgno}: an endpoint descriptor before any interface"
                        ),
                    );
                };
                let addr = b[p + 2];
                if addr & 0x0f == 0 || addr & 0x70 != 0 {
                    return err(
                        p + 2,
                        format!("bEndpointAddress {addr:#04x} is not a valid endpoint 1..15"),
                    );
                }
                if intf.eps.iter().any(|e| e.addr == addr) {
                    return err(
                        p + 2,
                        format!(
                            "configuration {cfgno} interface {} alternate setting {}: endpoint {addr:#04x} appears twice",
                            intf.num, intf.alt
                        ),
                    );
                }
                intf.eps.push(DumpEndpoint {
                    addr,
                    attr: b[p + 3],
                    mps: le16(b, p + 4),
                    interval: b[p + 6],
                });
            }
            0x0b => {
                need(8, "interface association")?;
                cfg.iads.push(DumpIad {
                    first: b[p + 2],
                    count: b[p + 3],
                    class: b[p + 4],
                    sub: b[p + 5],
                    proto: b[p + 6],
                });
            }
            _ => {
                if let Some(intf) = cfg.interfaces.last_mut().filter(|i| i.eps.is_empty()) {
                    intf.extra.extend_from_slice(&b[p..p + len]);
                }
            }
        }
        p += len;
    }
    check_eps(&cfg, open)?;
    let mut nums: Vec<u8> = cfg.interfaces.iter().map(|i| i.num).collect();
    nums.sort_unstable();
    nums.dedup();
    if nums.len() != cfg.num_interfaces as usize {
        return err(
            at + 4,
            format!(
                "configuration {cfgno}: bNumInterfaces is {} but {} interface(s) follow",
                cfg.num_interfaces,
                nums.len()
            ),
        );
    }
    for n in &nums {
        if !cfg.interfaces.iter().any(|i| i.num == *n && i.alt == 0) {
            return err(
                at + 4,
                format!("configuration {cfgno}: interface {n} has no alternate setting 0"),
            );
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests;

/// HID_MAX_DESCRIPTOR_SIZE: the largest report descriptor usbhid reads.
pub const HID_MAX_DESCRIPTOR_SIZE: usize = 4096;

/// The report descriptor's length from the HID descriptor among an
/// interface's class-specific descriptors `extra`, as usbhid_parse finds
/// it (the last REPORT entry); None: no HID descriptor, no report entry,
/// or a length usbhid refuses (0 or above [`HID_MAX_DESCRIPTOR_SIZE`]).
pub fn hid_report_length(extra: &[u8]) -> Option<usize> {
    let hid = crate::usbcore::abi::descriptors(extra).find(|d| d[1] == 0x21 && d.len() >= 9)?;
    let n = hid[5] as usize;
    let len = hid[6..]
        .chunks_exact(3)
        .take(n)
        .rfind(|c| c[0] == 0x22)
        .map(|c| u16::from_le_bytes([c[1], c[2]]) as usize)?;
    (1..=HID_MAX_DESCRIPTOR_SIZE).contains(&len).then_some(len)
}
