//! The `/sys/kernel/debug/usb/devices` text, in the format of the kernel's
//! `drivers/usb/core/devices.c`.

use std::fmt::Write;

use super::core_view::driver_of;
use super::ctx::{Ctx, DevId, Kind};
use super::descriptors::{class_name, decode_interval_us, Speed};

/// Append the text of one bus (root hub first, then depth first by port).
pub(crate) fn bus_text(ctx: &Ctx, out: &mut String) {
    dump(ctx, 0, 0, 0, 0, out);
}

fn dump(ctx: &Ctx, id: DevId, level: u8, index: u8, count: u8, out: &mut String) {
    let Some(d) = ctx.dev(id) else {
        return;
    };
    if !d.visible {
        return;
    }
    let parent_devnum = d
        .parent
        .and_then(|p| ctx.dev(p))
        .map(|p| p.devnum)
        .unwrap_or(0);
    let maxchild = d.hub.as_ref().map(|h| h.ports.len()).unwrap_or(0);
    let _ = writeln!(
        out,
        "\nT:  Bus={:02} Lev={:02} Prnt={:02} Port={:02} Cnt={:02} Dev#={:3} Spd={:<4} MxCh={:2}",
        ctx.bus,
        level,
        parent_devnum,
        index,
        count,
        d.devnum,
        d.speed().devices_str(),
        maxchild
    );
    if d.kind == Kind::Root {
        let max = if d.speed() == Speed::High { 800 } else { 900 };
        let _ = writeln!(
            out,
            "B:  Alloc={:3}/{:3} us ({:2}%), #Int={:3}, #Iso={:3}",
            0, max, 0, 0, 0
        );
    }
    let dd = &d.desc.dev;
    let _ = writeln!(
        out,
        "D:  Ver={:2x}.{:02x} Cls={:02x}({:<5}) Sub={:02x} Prot={:02x} MxPS={:2} #Cfgs={:3}",
        dd.bcd_usb >> 8,
        dd.bcd_usb & 0xff,
        dd.class,
        class_name(dd.class),
        dd.sub,
        dd.proto,
        dd.mps0,
        d.desc.raw.as_ref().map(|r| r.configs.len()).unwrap_or(1)
    );
    let _ = writeln!(
        out,
        "P:  Vendor={:04x} ProdID={:04x} Rev={:2x}.{:02x}",
        dd.vid,
        dd.pid,
        dd.bcd_device >> 8,
        dd.bcd_device & 0xff
    );
    if d.strings_read {
        let trunc = |s: &str| s.chars().take(100).collect::<String>();
        if let Some(s) = &d.desc.manufacturer {
            let _ = writeln!(out, "S:  Manufacturer={}", trunc(s));
        }
        if let Some(s) = &d.desc.product {
            let _ = writeln!(out, "S:  Product={}", trunc(s));
        }
        if let Some(s) = &d.desc.serial {
            let _ = writeln!(out, "S:  SerialNumber={}", trunc(s));
        }
    }
    let all = if d.desc.all_cfgs.is_empty() {
        std::slice::from_ref(&d.desc.cfg)
    } else {
        &d.desc.all_cfgs[..]
    };
    for c in all {
        let configured = d.configured && c.value == d.desc.cfg.value;
        let _ = writeln!(
            out,
            "C:{} #Ifs={:2} Cfg#={:2} Atr={:02x} MxPwr={:3}mA",
            if configured { '*' } else { ' ' },
            c.num_interfaces(),
            c.value,
            c.attr,
            c.max_power as u32 * 2
        );
        for iad in &c.iads {
            let _ = writeln!(
                out,
                "A:  FirstIf#={:2} IfCount={:2} Cls={:02x}({:<5}) Sub={:02x} Prot={:02x}",
                iad.first,
                iad.count,
                iad.class,
                class_name(iad.class),
                iad.sub,
                iad.proto
            );
        }
        for a in &c.alts {
            let active = configured && d.alt.get(a.num as usize).copied().unwrap_or(0) == a.alt;
            let driver = if configured {
                driver_of(d, a.num).unwrap_or_else(|| "(none)".into())
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "I:{} If#={:2} Alt={:2} #EPs={:2} Cls={:02x}({:<5}) Sub={:02x} Prot={:02x} Driver={}",
                if active { '*' } else { ' ' },
                a.num,
                a.alt,
                a.eps.len(),
                a.class,
                class_name(a.class),
                a.sub,
                a.proto,
                driver
            );
            for e in &a.eps {
                let ty = ["Ctrl", "Isoc", "Bulk", "Int."][e.xfer_type() as usize];
                let dir = if e.xfer_type() == 0 {
                    'B'
                } else if e.dir_in() {
                    'I'
                } else {
                    'O'
                };
                let mut ivl = decode_interval_us(d.speed(), e);
                let unit = if ivl % 1000 != 0 {
                    'u'
                } else {
                    ivl /= 1000;
                    'm'
                };
                let _ = writeln!(
                    out,
                    "E:  Ad={:02x}({}) Atr={:02x}({:<4}) MxPS={:4} Ivl={}{}s",
                    e.addr,
                    dir,
                    e.attr,
                    ty,
                    e.max_per_interval(d.speed()),
                    ivl,
                    unit
                );
            }
        }
    }
    if let Some(h) = &d.hub {
        let mut cnt = 0;
        for (i, p) in h.ports.iter().enumerate() {
            if let Some(c) = p.child {
                if ctx.dev(c).is_some_and(|c| c.visible) {
                    cnt += 1;
                    dump(ctx, c, level + 1, i as u8, cnt, out);
                }
            }
        }
    }
}
