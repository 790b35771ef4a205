//! Report descriptors as the HID core parses them (`hid_open_report` in
//! `drivers/hid/hid-core.c`): short items, the global stack, local usages
//! (usage pages joined as at each main item), collections, and the reports
//! each main item adds a field to, numbered or not, with their sizes; and
//! the values a report's bytes give each field (`hid_field_extract`).
//!
//! What the kernel refuses (an unbalanced collection, a report ID of 0, a
//! report longer than 16383 bytes, more than 12288 usages, a stack over-
//! or underflow) is an error here too: usbhid's probe then fails and the
//! interface gets no HID device.

/// `HID_MAX_BUFFER_SIZE`: the longest report the HID core moves.
pub const HID_MAX_BUFFER_SIZE: usize = 16384;

/// `HID_MAX_USAGES`.
const MAX_USAGES: usize = 12288;
/// `HID_GLOBAL_STACK_SIZE`.
const GLOBAL_STACK: usize = 4;
/// `HID_MAX_FIELDS`.
const MAX_FIELDS: usize = 256;

/// `HID_MAIN_ITEM_CONSTANT`.
pub const CONSTANT: u32 = 0x001;
/// `HID_MAIN_ITEM_VARIABLE`.
pub const VARIABLE: u32 = 0x002;
/// `HID_MAIN_ITEM_RELATIVE`.
pub const RELATIVE: u32 = 0x004;
/// `HID_MAIN_ITEM_NULL_STATE`.
pub const NULL_STATE: u32 = 0x040;
/// `HID_MAIN_ITEM_BUFFERED_BYTE`.
pub const BUFFERED_BYTE: u32 = 0x100;

/// `HID_COLLECTION_PHYSICAL`, `APPLICATION`, `LOGICAL`.
pub const COLLECTION_PHYSICAL: u8 = 0;
/// An application collection.
pub const COLLECTION_APPLICATION: u8 = 1;
/// A logical collection.
pub const COLLECTION_LOGICAL: u8 = 2;

/// `enum hid_report_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Input reports.
    Input = 0,
    /// Output reports.
    Output = 1,
    /// Feature reports.
    Feature = 2,
}

/// A report descriptor the HID core refuses, with the reason `hid_err`
/// logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("report descriptor refused: {0}")]
pub struct ParseError(pub &'static str);

/// A collection (`struct hid_collection`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collection {
    /// Physical, application, logical, ...
    pub kind: u8,
    /// Its usage (page and ID).
    pub usage: u32,
}

/// A field of a report (`struct hid_field`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The main item's flags.
    pub flags: u32,
    /// Where it starts in the report, in bits (the report ID not counted).
    pub offset: u32,
    /// Bits per value.
    pub size: u32,
    /// Values.
    pub count: u32,
    /// The usages (page and ID), one per value of a variable field (the
    /// last repeated), every one of an array field's.
    pub usages: Vec<u32>,
    /// Logical minimum and maximum.
    pub logical_min: i32,
    /// Logical maximum.
    pub logical_max: i32,
    /// Physical minimum.
    pub physical_min: i32,
    /// Physical maximum.
    pub physical_max: i32,
    /// The unit and its exponent.
    pub unit: u32,
    /// The unit exponent.
    pub unit_exponent: i32,
    /// The usages of the innermost application, physical and logical
    /// collections around it (0: none).
    pub application: u32,
    /// The innermost physical collection's usage.
    pub physical: u32,
    /// The innermost logical collection's usage.
    pub logical: u32,
}

impl Field {
    /// Whether it is a variable (not an array) field.
    pub fn variable(&self) -> bool {
        self.flags & VARIABLE != 0
    }
}

/// A report (`struct hid_report`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Input, output or feature.
    pub kind: Kind,
    /// Its ID (0: unnumbered).
    pub id: u8,
    /// The usage of the application collection of its first field.
    pub application: u32,
    /// Its size in bits, padding included, the ID not.
    pub bits: u32,
    /// Its fields, padding left out.
    pub fields: Vec<Field>,
}

impl Report {
    /// `hid_compute_report_size`: its bytes, the ID not counted.
    pub fn bytes(&self) -> usize {
        if self.bits == 0 {
            0
        } else {
            ((self.bits as usize - 1) >> 3) + 1
        }
    }
}

/// A parsed report descriptor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// The reports, of each kind in the order they were first named.
    pub reports: Vec<Report>,
    /// Every collection, in order.
    pub collections: Vec<Collection>,
    /// Whether the reports of each kind are numbered.
    pub numbered: [bool; 3],
    /// Application collections (`maxapplication`).
    pub applications: u32,
}

#[derive(Clone, Copy, Default)]
struct Global {
    usage_page: u32,
    logical_min: i32,
    logical_max: i32,
    physical_min: i32,
    physical_max: i32,
    unit_exponent: i32,
    unit: u32,
    report_size: u32,
    report_count: u32,
    report_id: u32,
}

#[derive(Default)]
struct Local {
    /// (usage, its item's size).
    usages: Vec<(u32, u8)>,
    usage_minimum: u32,
    delimiter_depth: u32,
    delimiter_branch: u32,
}

impl Descriptor {
    /// `hid_open_report`'s parse of `rdesc`.
    pub fn parse(rdesc: &[u8]) -> Result<Descriptor, ParseError> {
        let mut d = Descriptor::default();
        let mut g = Global::default();
        let mut gstack: Vec<Global> = Vec::new();
        let mut l = Local::default();
        let mut cstack: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < rdesc.len() {
            let b = rdesc[i];
            i += 1;
            if b == 0xfe {
                // A long item: its size, tag and data are skipped.
                let Some(&size) = rdesc.get(i) else {
                    return Err(ParseError("unexpected long global item"));
                };
                i += 2 + size as usize;
                if i > rdesc.len() {
                    return Err(ParseError("unexpected long global item"));
                }
                continue;
            }
            let size = [0usize, 1, 2, 4][(b & 3) as usize];
            let (kind, tag) = ((b >> 2) & 3, b >> 4);
            let Some(raw) = rdesc.get(i..i + size) else {
                return Err(ParseError("item fetching failed"));
            };
            i += size;
            let udata = match size {
                1 => u32::from(raw[0]),
                2 => u32::from(u16::from_le_bytes([raw[0], raw[1]])),
                4 => u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]),
                _ => 0,
            };
            let sdata = match size {
                1 => i32::from(raw[0] as i8),
                2 => i32::from(i16::from_le_bytes([raw[0], raw[1]])),
                4 => udata as i32,
                _ => 0,
            };
            match kind {
                0 => {
                    d.main(tag, udata, &g, &mut l, &mut cstack)?;
                    l = Local::default();
                }
                1 => match tag {
                    0xa => {
                        if gstack.len() == GLOBAL_STACK {
                            return Err(ParseError("global environment stack overflow"));
                        }
                        gstack.push(g);
                    }
                    0xb => {
                        g = gstack
                            .pop()
                            .ok_or(ParseError("global environment stack underflow"))?
                    }
                    0x0 => g.usage_page = udata,
                    0x1 => g.logical_min = sdata,
                    0x2 => {
                        g.logical_max = if g.logical_min < 0 {
                            sdata
                        } else {
                            udata as i32
                        }
                    }
                    0x3 => g.physical_min = sdata,
                    0x4 => {
                        g.physical_max = if g.physical_min < 0 {
                            sdata
                        } else {
                            udata as i32
                        }
                    }
                    0x5 => {
                        g.unit_exponent = if sdata as u32 & 0xffff_fff0 == 0 {
                            (sdata << 28) >> 28
                        } else {
                            sdata
                        }
                    }
                    0x6 => g.unit = udata,
                    0x7 => {
                        if udata > 256 {
                            return Err(ParseError("invalid report_size"));
                        }
                        g.report_size = udata;
                    }
                    0x8 => {
                        g.report_id = udata;
                        if udata == 0 || udata >= 256 {
                            return Err(ParseError("report_id is invalid"));
                        }
                    }
                    0x9 => {
                        if udata as usize > MAX_USAGES {
                            return Err(ParseError("invalid report_count"));
                        }
                        g.report_count = udata;
                    }
                    _ => return Err(ParseError("unknown global tag")),
                },
                2 => match tag {
                    0xa => {
                        if udata != 0 {
                            if l.delimiter_depth != 0 {
                                return Err(ParseError("nested delimiters"));
                            }
                            l.delimiter_depth += 1;
                            l.delimiter_branch += 1;
                        } else {
                            if l.delimiter_depth < 1 {
                                return Err(ParseError("bogus close delimiter"));
                            }
                            l.delimiter_depth -= 1;
                        }
                    }
                    _ if l.delimiter_branch > 1 => {}
                    0x0 => add_usage(&mut l, &g, udata, size as u8)?,
                    0x1 => l.usage_minimum = udata,
                    0x2 => {
                        let mut max = udata;
                        let count = max.wrapping_sub(l.usage_minimum) as usize;
                        if count.saturating_add(l.usages.len()) >= MAX_USAGES {
                            let m = (MAX_USAGES - l.usages.len()) as i64
                                + i64::from(l.usage_minimum)
                                - 1;
                            if m <= 0 {
                                return Err(ParseError("no more usage index available"));
                            }
                            max = m as u32;
                        }
                        let mut n = l.usage_minimum;
                        while n <= max {
                            add_usage(&mut l, &g, n, size as u8)?;
                            n = match n.checked_add(1) {
                                Some(n) => n,
                                None => break,
                            };
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        if !cstack.is_empty() {
            return Err(ParseError(
                "unbalanced collection at end of report description",
            ));
        }
        if l.delimiter_depth != 0 {
            return Err(ParseError(
                "unbalanced delimiter at end of report description",
            ));
        }
        Ok(d)
    }

    /// A main item: a collection opened or closed, or a field added.
    fn main(
        &mut self,
        tag: u8,
        data: u32,
        g: &Global,
        l: &mut Local,
        cstack: &mut Vec<usize>,
    ) -> Result<(), ParseError> {
        // hid_concatenate_last_usage_page: the usages since the last page
        // change take the current page.
        let page = g.usage_page;
        for (u, size) in l.usages.iter_mut().rev() {
            if *size > 2 {
                continue;
            }
            if *u >> 16 == page {
                break;
            }
            *u = (*u & 0xffff) | ((page & 0xffff) << 16);
        }
        match tag {
            0xa => {
                let usage = l.usages.first().map_or(0, |u| u.0);
                cstack.push(self.collections.len());
                self.collections.push(Collection {
                    kind: data as u8,
                    usage,
                });
                if data as u8 == COLLECTION_APPLICATION {
                    self.applications += 1;
                }
            }
            0xc if cstack.pop().is_none() => {
                return Err(ParseError("collection stack underflow"));
            }
            0x8 | 0x9 | 0xb => {
                let kind = match tag {
                    0x8 => Kind::Input,
                    0x9 => Kind::Output,
                    _ => Kind::Feature,
                };
                let application = self.lookup(cstack, COLLECTION_APPLICATION);
                let id = g.report_id as u8;
                let ri = match self
                    .reports
                    .iter()
                    .position(|r| r.kind == kind && r.id == id)
                {
                    Some(i) => i,
                    None => {
                        if id != 0 {
                            self.numbered[kind as usize] = true;
                        }
                        self.reports.push(Report {
                            kind,
                            id,
                            application,
                            bits: 0,
                            fields: Vec::new(),
                        });
                        self.reports.len() - 1
                    }
                };
                let invalid = if g.logical_min < 0 {
                    g.logical_max < g.logical_min
                } else {
                    (g.logical_max as u32) < (g.logical_min as u32)
                };
                if invalid {
                    return Err(ParseError("logical range invalid"));
                }
                let physical = self.lookup(cstack, COLLECTION_PHYSICAL);
                let logical = self.lookup(cstack, COLLECTION_LOGICAL);
                let r = &mut self.reports[ri];
                let offset = r.bits;
                r.bits = r
                    .bits
                    .saturating_add(g.report_size.saturating_mul(g.report_count));
                if r.bits as usize > (HID_MAX_BUFFER_SIZE - 1) << 3 {
                    return Err(ParseError("report is too long"));
                }
                if l.usages.is_empty() {
                    return Ok(()); // padding
                }
                if r.fields.len() == MAX_FIELDS {
                    return Ok(()); // "too many fields in report": dropped
                }
                let n = l.usages.len().max(g.report_count as usize);
                let usages = (0..n)
                    .map(|i| l.usages[i.min(l.usages.len() - 1)].0)
                    .collect();
                r.fields.push(Field {
                    flags: data,
                    offset,
                    size: g.report_size,
                    count: g.report_count,
                    usages,
                    logical_min: g.logical_min,
                    logical_max: g.logical_max,
                    physical_min: g.physical_min,
                    physical_max: g.physical_max,
                    unit: g.unit,
                    unit_exponent: g.unit_exponent,
                    application,
                    physical,
                    logical,
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// `hid_lookup_collection`: the usage of the innermost open
    /// collection of `kind` (0: none).
    fn lookup(&self, cstack: &[usize], kind: u8) -> u32 {
        cstack
            .iter()
            .rev()
            .map(|&i| &self.collections[i])
            .find(|c| c.kind == kind)
            .map_or(0, |c| c.usage)
    }

    /// The index of the report of `kind` that `data` is.
    pub fn report_index(&self, kind: Kind, data: &[u8]) -> Option<usize> {
        let id = if self.numbered[kind as usize] {
            *data.first()?
        } else {
            0
        };
        self.reports
            .iter()
            .position(|r| r.kind == kind && r.id == id)
    }

    /// Whether any collection is one hid-input makes an input device for
    /// (`IS_INPUT_APPLICATION`).
    pub fn has_input_application(&self) -> bool {
        self.collections.iter().any(|c| {
            (c.kind == COLLECTION_APPLICATION || c.kind == COLLECTION_PHYSICAL)
                && is_input_application(c.usage)
        })
    }
}

/// `IS_INPUT_APPLICATION`.
pub fn is_input_application(a: u32) -> bool {
    (0x0001_0000..=0x0001_0008).contains(&a)
        || (0x000d_0001..=0x000d_0006).contains(&a)
        || a == 0x0001_0080
        || a == 0x000c_0001
        || a == 0x0001_000c
}

fn add_usage(l: &mut Local, g: &Global, usage: u32, size: u8) -> Result<(), ParseError> {
    if l.usages.len() >= MAX_USAGES {
        return Err(ParseError("usage index exceeded"));
    }
    let u = if size <= 2 {
        (usage & 0xffff) | ((g.usage_page & 0xffff) << 16)
    } else {
        usage
    };
    l.usages.push((u, size));
    Ok(())
}

/// `hid_field_extract`: `n` bits (at most 32) at bit `offset` of `data`,
/// little endian; bits past its end read as 0.
pub fn extract(data: &[u8], offset: u32, n: u32) -> u32 {
    let mut v: u64 = 0;
    for k in 0..n.min(32) {
        let bit = offset + k;
        let byte = data.get((bit / 8) as usize).copied().unwrap_or(0);
        v |= u64::from((byte >> (bit % 8)) & 1) << k;
    }
    v as u32
}

/// `snto32`: the `n`-bit two's complement value `v`.
pub fn signed(v: u32, n: u32) -> i32 {
    if n == 0 || n >= 32 {
        return v as i32;
    }
    let shift = 32 - n;
    ((v << shift) as i32) >> shift
}

/// `hid_input_fetch_field`'s value `i` of `f` in `data` (the ID stripped).
pub fn value(f: &Field, data: &[u8], i: u32) -> i32 {
    let raw = extract(data, f.offset + i * f.size, f.size);
    if f.logical_min < 0 {
        signed(raw, f.size)
    } else {
        raw as i32
    }
}

/// `s32ton`: `v` in `n` bits, saturated.
pub fn to_bits(v: i32, n: u32) -> u32 {
    if v == 0 || n == 0 {
        return 0;
    }
    if n >= 32 {
        return v as u32;
    }
    let a = v >> (n - 1);
    if a != 0 && a != -1 {
        return if v < 0 {
            1 << (n - 1)
        } else {
            (1 << (n - 1)) - 1
        };
    }
    (v as u32) & ((1u32 << n) - 1)
}

/// `hid_output_report`'s placing of `bits` (at most 32) at bit `offset`.
pub fn implement(buf: &mut [u8], offset: u32, n: u32, bits: u32) {
    for k in 0..n.min(32) {
        let bit = offset + k;
        let Some(b) = buf.get_mut((bit / 8) as usize) else {
            return;
        };
        if bits >> k & 1 != 0 {
            *b |= 1 << (bit % 8);
        } else {
            *b &= !(1 << (bit % 8));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// qemu's usb-kbd report descriptor.
    pub(crate) const KEYBOARD: [u8; 63] = [
        0x05, 0x01, 0x09, 0x06, 0xa1, 0x01, 0x75, 0x01, 0x95, 0x08, 0x05, 0x07, 0x19, 0xe0, 0x29,
        0xe7, 0x15, 0x00, 0x25, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x08, 0x81, 0x01, 0x95, 0x05,
        0x75, 0x01, 0x05, 0x08, 0x19, 0x01, 0x29, 0x05, 0x91, 0x02, 0x95, 0x01, 0x75, 0x03, 0x91,
        0x01, 0x95, 0x06, 0x75, 0x08, 0x15, 0x00, 0x25, 0xff, 0x05, 0x07, 0x19, 0x00, 0x29, 0xff,
        0x81, 0x00, 0xc0,
    ];

    #[test]
    fn qemus_keyboard_has_an_8_byte_input_and_a_1_byte_output_report() {
        let d = Descriptor::parse(&KEYBOARD).unwrap();
        assert_eq!(d.applications, 1);
        assert_eq!(d.numbered, [false; 3]);
        assert_eq!(d.reports.len(), 2);
        let input = &d.reports[0];
        assert_eq!(
            (input.kind, input.bytes(), input.fields.len()),
            (Kind::Input, 8, 2)
        );
        let mods = &input.fields[0];
        assert_eq!((mods.offset, mods.size, mods.count), (0, 1, 8));
        assert_eq!(mods.usages[0], 0x0007_00e0);
        assert_eq!(mods.usages[7], 0x0007_00e7);
        let keys = &input.fields[1];
        assert_eq!((keys.offset, keys.size, keys.count), (16, 8, 6));
        assert_eq!(keys.usages.len(), 256);
        assert!(!keys.variable());
        assert_eq!(keys.application, 0x0001_0006);
        let leds = &d.reports[1];
        assert_eq!((leds.kind, leds.bytes()), (Kind::Output, 1));
        assert_eq!(
            leds.fields[0].usages,
            (1..=5).map(|u| 0x0008_0000 | u).collect::<Vec<_>>()
        );
    }

    #[test]
    fn what_the_kernel_refuses_is_refused() {
        // an open collection
        assert!(Descriptor::parse(&[0x05, 0x01, 0x09, 0x02, 0xa1, 0x01]).is_err());
        // report ID 0
        assert!(Descriptor::parse(&[0x85, 0x00]).is_err());
        // a pop with nothing pushed
        assert!(Descriptor::parse(&[0xb4]).is_err());
        // a close with nothing open
        assert!(Descriptor::parse(&[0xc0]).is_err());
        // a truncated item
        assert!(Descriptor::parse(&[0x26, 0xff]).is_err());
        // a report of 16384 bytes
        assert!(
            Descriptor::parse(&[0x75, 0x08, 0x96, 0x00, 0x40, 0x09, 0x01, 0x81, 0x02]).is_err()
        );
    }

    #[test]
    fn values_are_taken_as_the_kernel_takes_them() {
        assert_eq!(extract(&[0xab, 0xcd], 4, 8), 0xda);
        assert_eq!(signed(0xff, 8), -1);
        assert_eq!(signed(0x7f, 8), 127);
        assert_eq!(to_bits(-1, 8), 0xff);
        assert_eq!(to_bits(300, 8), 127);
        let mut b = [0u8; 2];
        implement(&mut b, 3, 5, 0x1f);
        assert_eq!(b, [0xf8, 0]);
    }
}
