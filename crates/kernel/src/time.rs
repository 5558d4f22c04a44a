//! UTC calendar times from epoch milliseconds (no time-zone database needed).

/// A UTC time broken into its calendar parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millis: u32,
}

/// The UTC calendar time of `ms` milliseconds after the Unix epoch (proleptic Gregorian).
pub fn utc(ms: i64) -> UtcTime {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    UtcTime {
        year,
        month: month as u32,
        day: day as u32,
        hour: (rem / 3600) as u32,
        minute: ((rem % 3600) / 60) as u32,
        second: (rem % 60) as u32,
        millis: ms.rem_euclid(1000) as u32,
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (JavaScript's `Date.prototype.toISOString` for these years).
pub fn iso8601(ms: i64) -> String {
    let t = utc(ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.millis
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_leap_days_and_negative_times() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_796_142_036_014), "2026-12-01T16:20:36.014Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(-1), "1969-12-31T23:59:59.999Z");
    }
}
