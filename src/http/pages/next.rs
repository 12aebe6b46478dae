//! Where a shopper goes after signing in: `/login?next=...` must send them to a page of this
//! site and nowhere else, under the browser's own reading of the URL. A browser drops tabs and
//! new lines from a URL and reads `\` as `/`, so `/\t/evil.example` or `/\evil.example` would
//! become `//evil.example`, another site. Only a path made of plain URL characters, starting
//! with a single `/`, is kept.

/// `next` if it is a path of this site, else `/`.
pub fn local_path(next: Option<String>) -> String {
    match next {
        Some(path) if is_local(&path) => path,
        _ => "/".into(),
    }
}

fn is_local(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.first() == Some(&b'/')
        && !matches!(bytes.get(1), Some(b'/' | b'\\'))
        && path.len() <= 2048
        && bytes.iter().all(|&b| is_url_char(b))
}

/// RFC 3986's unreserved and sub-delimiter characters, `:`, `@`, `/`, `?`, `#` and `%`: no
/// space, control character, backslash or anything outside ASCII.
fn is_url_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?#%".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_this_site_are_kept() {
        for path in [
            "/",
            "/orders",
            "/?event=3#top",
            "/orders?x=%2F%2Fa",
            "/a:b@c",
        ] {
            assert_eq!(local_path(Some(path.into())), path);
        }
    }

    #[test]
    fn anything_a_browser_could_read_as_another_site_goes_home() {
        for path in [
            "//evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "\t//evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/ /evil.example",
            "/\\/evil.example",
            "https://evil.example",
            "evil.example",
            "javascript:alert(1)",
            "/\u{3000}/evil.example",
            "/\u{ff0f}evil.example",
            "",
        ] {
            assert_eq!(local_path(Some(path.into())), "/", "{path:?}");
        }
        assert_eq!(local_path(None), "/");
        assert_eq!(local_path(Some(format!("/{}", "a".repeat(3000)))), "/");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Where a browser on `page` goes when sent to `location`, by the WHATWG URL rules
        /// browsers follow.
        fn followed(page: &url::Url, location: &str) -> url::Url {
            page.join(location).expect("a local path always resolves")
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Whatever comes in, the answer is the path itself or `/`, and a browser that
            /// follows it stays on this site.
            #[test]
            fn the_answer_is_always_a_path_of_this_site(
                text in any::<String>(),
                tricky in "[/\\\t\n\r .:@%a-z?#\u{3000}\u{ff0f}]{0,12}",
            ) {
                let page = url::Url::parse("https://shop.example/login?next=x").unwrap();
                for next in [text, tricky.clone(), format!("/{tricky}")] {
                    let path = local_path(Some(next.clone()));
                    prop_assert!(path == next || path == "/", "{:?} became {:?}", next, path);
                    let there = followed(&page, &path);
                    prop_assert_eq!(there.origin(), page.origin(), "{:?} leaves the site", next);
                    prop_assert!(path.starts_with('/') && !path.starts_with("//"));
                }
            }
        }
    }
}
