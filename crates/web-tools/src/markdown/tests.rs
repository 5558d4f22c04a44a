use super::*;
use pretty_assertions::assert_eq;

/// The conformance fixture's page (test data from the upstream scenario).
const MENU: &str = "<!doctype html>
<html><head><title>Menu</title><style>.x{color:red}</style><script>ignored()</script></head>
<body>
<h1>Caf&eacute; menu</h1>
<p>Prices include <strong>service &amp; <em>tax</em></strong> &mdash; updated daily.</p>
<ul><li>Espresso</li><li>Flat white</li></ul>
<table><thead><tr><th>Drink</th><th>Price</th></tr></thead><tbody><tr><td>Espresso</td><td>&euro;2</td></tr><tr><td>Flat white</td><td>&euro;3</td></tr></tbody></table>
<p>See <a href=\"https://fixture.invalid/specials\">today&rsquo;s specials</a>.</p>
</body></html>
";

#[test]
fn the_fixture_page_converts_exactly() {
    assert_eq!(
        html_to_markdown(MENU),
        "Menu\n\n# Café menu\n\nPrices include **service & _tax_** — updated daily.\n\n-   Espresso\n-   Flat white\n\n| Drink | Price |\n| --- | --- |\n| Espresso | €2  |\n| Flat white | €3  |\n\nSee [today’s specials](https://fixture.invalid/specials)."
    );
}

#[test]
fn common_structures() {
    let cases: &[(&str, &str)] = &[
        ("<p>a  b\n c</p><p>d</p>", "a b c\n\nd"),
        (
            "<ol start=\"3\"><li>x</li><li>y<ul><li>z</li></ul></li></ol>",
            "3.  x\n4.  y\n    -   z",
        ),
        (
            "<pre><code class=\"language-rust\">fn x() {}\n</code></pre>",
            "```rust\nfn x() {}\n```",
        ),
        ("<p>use <code>a`b</code> now</p>", "use ``a`b`` now"),
        (
            "<p>1. not a list * or _em_ [x]</p>",
            "1\\. not a list \\* or \\_em\\_ \\[x\\]",
        ),
        (
            "<blockquote><p>q1</p><p>q2</p></blockquote>",
            "> q1\n> \n> q2",
        ),
        ("<p>a<br>b</p><hr>", "a  \nb\n\n* * *"),
        (
            "<p><a href=\"/x(1)\" title=\"T\">l</a> <img src=\"i.png\" alt=\"A\"></p>",
            "[l](/x\\(1\\) \"T\") ![A](i.png)",
        ),
        ("<p>x<!-- c --> <del>y</del></p>", "x ~~y~~"),
        (
            "<table><tr><td>a</td><td>b|c</td></tr></table>",
            "|     |     |\n| --- | --- |\n| a   | b\\|c |",
        ),
        (
            "<table><tr><th align=\"right\">n</th></tr><tr><td>1</td></tr></table>",
            "| n   |\n| ---: |\n| 1   |",
        ),
        ("<p> <em> spaced </em> </p>", "_spaced_"),
        ("", ""),
    ];
    for (html, md) in cases {
        assert_eq!(&html_to_markdown(html), md, "{html}");
    }
}

#[test]
fn deep_nesting_is_returned_raw() {
    let html = format!("{}x{}", "<div>".repeat(600), "</div>".repeat(600));
    assert_eq!(html_to_markdown(&html), html);
    let fine = format!("{}x{}", "<div>".repeat(100), "</div>".repeat(100));
    assert_eq!(html_to_markdown(&fine), "x");
    // Raw text does not count; closing tags inside comments do not close anything.
    let raw = format!("<script>{}</script>ok", "<div>".repeat(600));
    assert_eq!(html_to_markdown(&raw), "ok");
    let tricked =
        format!("{}<!--{}-->", "<b>".repeat(300), "</b>".repeat(300)) + &"<i>".repeat(300);
    assert_eq!(html_to_markdown(&tricked), tricked);
}
