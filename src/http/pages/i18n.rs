//! Every shopper-facing string, one table per language, so a page is wholly in one language and
//! a translation is a change to one file. Templates read [`Strings`]; the page script gets
//! [`Script`] as JSON in a `data-i18n` attribute (the CSP forbids inline scripts). API error
//! messages are not here: they stay English, with stable codes the script translates.

use axum::http::{HeaderMap, header};
use serde::Serialize;

/// The cookie that keeps the shopper's choice of language; it beats `Accept-Language`.
pub const LANG_COOKIE: &str = "seckill_lang";

/// A page language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Zh,
    En,
}

impl Lang {
    /// The cookie value and `/lang/{code}` path segment of a language.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "zh" => Some(Self::Zh),
            "en" => Some(Self::En),
            _ => None,
        }
    }

    /// The inverse of [`Self::from_code`].
    pub fn code(self) -> &'static str {
        match self {
            Self::Zh => "zh",
            Self::En => "en",
        }
    }

    /// The language of a request: the `seckill_lang` cookie if it names one, else the most
    /// preferred of Chinese (`zh*`) and English in `Accept-Language`, else English.
    pub fn of(request: &HeaderMap) -> Self {
        crate::http::extract::cookie(request, LANG_COOKIE)
            .and_then(Self::from_code)
            .or_else(|| {
                request
                    .get_all(header::ACCEPT_LANGUAGE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(Self::preferred)
            })
            .unwrap_or(Self::En)
    }

    /// The Chinese or English tag of highest quality in one `Accept-Language` value; the first
    /// such tag wins a tie, as the header lists the favourite first.
    fn preferred(accept: &str) -> Option<Self> {
        let mut best: Option<(f32, Self)> = None;
        for item in accept.split(',') {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let quality = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let lang = if tag == "zh" || tag.starts_with("zh-") {
                Self::Zh
            } else if tag == "en" || tag.starts_with("en-") {
                Self::En
            } else {
                continue;
            };
            if quality > 0.0 && best.is_none_or(|(q, _)| quality > q) {
                best = Some((quality, lang));
            }
        }
        best.map(|(_, lang)| lang)
    }

    /// This language's strings.
    pub fn strings(self) -> &'static Strings {
        match self {
            Self::Zh => &ZH,
            Self::En => &EN,
        }
    }
}

/// The strings of the page templates, with those the script needs in [`Script`].
pub struct Strings {
    /// `<html lang>`.
    pub html_lang: &'static str,
    /// The other language, offered by the switch: its code, its `lang` tag and its own name.
    pub other_code: &'static str,
    pub other_html_lang: &'static str,
    pub other_name: &'static str,
    pub switch_label: &'static str,
    pub brand_tag: &'static str,
    pub home_label: &'static str,
    pub nav_label: &'static str,
    pub nav_sale: &'static str,
    pub nav_orders: &'static str,
    pub sign_in: &'static str,
    pub log_out: &'static str,
    pub footer: &'static str,
    pub sale_title: &'static str,
    pub sale_tagline: &'static str,
    pub no_events_title: &'static str,
    pub no_events_text: &'static str,
    pub sessions: &'static str,
    pub no_products_title: &'static str,
    pub no_products_text: &'static str,
    pub products: &'static str,
    /// Around the remaining count: "剩余 3 / 10 件", "3 / 10 left".
    pub remaining_before: &'static str,
    pub remaining_after: &'static str,
    pub login_title: &'static str,
    pub welcome: &'static str,
    pub login_intro: &'static str,
    pub username: &'static str,
    pub password: &'static str,
    pub fill_in: &'static str,
    pub register: &'static str,
    pub register_submit: &'static str,
    pub register_hint: &'static str,
    pub orders_count: &'static str,
    pub pay_hint: &'static str,
    pub sandbox: &'static str,
    pub no_orders_title: &'static str,
    pub no_orders_text: &'static str,
    pub go_to_sale: &'static str,
    pub col_order: &'static str,
    pub col_product: &'static str,
    pub col_qty: &'static str,
    pub col_total: &'static str,
    pub col_status: &'static str,
    pub col_created: &'static str,
    pub col_actions: &'static str,
    pub awaiting_payment: &'static str,
    pub paid: &'static str,
    pub cancelled: &'static str,
    pub refunded: &'static str,
    pub pay_left: &'static str,
    pub pay: &'static str,
    pub cancel: &'static str,
    pub payment_title: &'static str,
    pub order: &'static str,
    pub pay_waiting: &'static str,
    pub pay_refunded: &'static str,
    pub pay_cancelled: &'static str,
    pub script: Script,
}

/// The strings the page script shows. `{n}` and `{t}` are filled in by the script.
#[derive(Serialize)]
pub struct Script {
    pub upcoming: &'static str,
    pub live: &'static str,
    pub ended: &'static str,
    /// An operator paused buying: the card's badge and button.
    pub paused: &'static str,
    pub clock_to_start: &'static str,
    pub clock_to_end: &'static str,
    pub clock_ended: &'static str,
    pub to_start: &'static str,
    pub to_end: &'static str,
    pub buy: &'static str,
    pub buying: &'static str,
    pub bought: &'static str,
    pub held: &'static str,
    pub sold_out: &'static str,
    pub not_started: &'static str,
    pub retry_in: &'static str,
    /// The sold share: "已抢 {n}%", "{n}% sold".
    pub sold: &'static str,
    pub almost_gone: &'static str,
    pub network_error: &'static str,
    pub buy_ok: &'static str,
    pub order_no: &'static str,
    pub pay_before: &'static str,
    pub pay_soon: &'static str,
    pub go_pay: &'static str,
    pub sold_out_msg: &'static str,
    pub limit_msg: &'static str,
    pub view_orders: &'static str,
    pub not_started_msg: &'static str,
    pub ended_msg: &'static str,
    pub paused_msg: &'static str,
    pub rate_limited_msg: &'static str,
    pub buy_failed: &'static str,
    /// The buy token of a guarded sale could not be had, or was refused.
    pub guard_failed: &'static str,
    pub invalid_credentials: &'static str,
    pub username_taken: &'static str,
    /// The account was disabled by the operator (`user_disabled`).
    pub user_disabled: &'static str,
    pub invalid_username: &'static str,
    pub weak_password: &'static str,
    pub rate_limited: &'static str,
    /// Too many accounts registered from this address, or by everybody, this hour.
    pub too_many_registrations: &'static str,
    /// Too many sign-ins to this account for now.
    pub too_many_sign_ins: &'static str,
    /// Too many passwords being checked on the server at once.
    pub busy: &'static str,
    /// The registration puzzle was not solved in time, or for another name.
    pub invalid_challenge_answer: &'static str,
    pub credentials_required: &'static str,
    pub registering: &'static str,
    pub signing_in: &'static str,
    pub register_failed: &'static str,
    pub login_failed: &'static str,
    pub expired: &'static str,
    pub pay_failed: &'static str,
    pub cancel_failed: &'static str,
}

impl Strings {
    /// The script's strings as JSON, for the page's `data-i18n` attribute.
    pub fn script_json(&self) -> String {
        serde_json::to_string(&self.script).unwrap_or_default()
    }

    /// The sold share of a product, e.g. "42% sold".
    pub fn sold(&self, percent: &i64) -> String {
        self.script.sold.replace("{n}", &percent.to_string())
    }

    /// The label of a sale status ("upcoming", "live" or "ended").
    pub fn sale_status(&self, status: &str) -> &'static str {
        match status {
            "live" => self.script.live,
            "upcoming" => self.script.upcoming,
            _ => self.script.ended,
        }
    }

    /// The label of an order status; an unknown one shows as itself.
    pub fn order_status<'a>(&self, status: &'a str) -> &'a str {
        match status {
            "awaiting_payment" => self.awaiting_payment,
            "paid" => self.paid,
            "cancelled" => self.cancelled,
            "refunded" => self.refunded,
            other => other,
        }
    }
}

/// 中文.
pub const ZH: Strings = Strings {
    html_lang: "zh-CN",
    other_code: "en",
    other_html_lang: "en",
    other_name: "English",
    switch_label: "切换语言",
    brand_tag: "秒杀",
    home_label: "seckill 秒杀 首页",
    nav_label: "主导航",
    nav_sale: "抢购",
    nav_orders: "我的订单",
    sign_in: "登录",
    log_out: "退出",
    footer: "seckill 秒杀 · 每场限量，售完即止",
    sale_title: "限时秒杀",
    sale_tagline: "每场限量，售完即止",
    no_events_title: "暂无秒杀场次",
    no_events_text: "请稍后再来看看。",
    sessions: "场次",
    no_products_title: "本场暂无商品",
    no_products_text: "看看其他场次吧。",
    products: "商品",
    remaining_before: "剩余 ",
    remaining_after: " 件",
    login_title: "登录 / 注册",
    welcome: "欢迎来到 seckill 秒杀",
    login_intro: "登录后即可参与抢购",
    username: "用户名",
    password: "密码",
    fill_in: "一键填入",
    register: "注册",
    register_submit: "注册并登录",
    register_hint: "注册后自动登录。",
    orders_count: "订单数",
    pay_hint: "待支付订单请在倒计时结束前完成支付",
    sandbox: "沙箱支付：不涉及真实资金",
    no_orders_title: "还没有订单",
    no_orders_text: "快去抢购吧！",
    go_to_sale: "去抢购",
    col_order: "订单号",
    col_product: "商品",
    col_qty: "数量",
    col_total: "金额",
    col_status: "状态",
    col_created: "下单时间",
    col_actions: "操作",
    awaiting_payment: "待支付",
    paid: "已支付",
    cancelled: "已取消",
    refunded: "已退款",
    pay_left: "剩余支付时间",
    pay: "支付",
    cancel: "取消",
    payment_title: "支付结果",
    order: "订单",
    pay_waiting: "等待支付确认…",
    pay_refunded: "订单已取消，款项已退回",
    pay_cancelled: "订单已取消",
    script: Script {
        upcoming: "即将开始",
        live: "抢购中",
        ended: "已结束",
        paused: "暂停抢购",
        clock_to_start: "本场距开始",
        clock_to_end: "本场距结束",
        clock_ended: "本场已结束",
        to_start: "距开始 ",
        to_end: "距结束 ",
        buy: "立即抢购",
        buying: "抢购中…",
        bought: "已抢到",
        held: "已购买",
        sold_out: "已售罄",
        not_started: "未开始",
        retry_in: "{n} 秒后重试",
        sold: "已抢 {n}%",
        almost_gone: "即将售罄",
        network_error: "网络异常，请重试",
        buy_ok: "抢购成功！",
        order_no: "订单 ",
        pay_before: "请于 {t} 前完成支付。",
        pay_soon: "请尽快完成支付。",
        go_pay: "去支付 →",
        sold_out_msg: "手慢了，已售罄",
        limit_msg: "您已购买过该商品 ",
        view_orders: "查看订单 →",
        not_started_msg: "活动尚未开始，请稍候",
        ended_msg: "活动已结束",
        paused_msg: "该商品暂停抢购，请稍后再试",
        rate_limited_msg: "人太多啦，请 {n} 秒后再试",
        buy_failed: "抢购失败，请重试",
        guard_failed: "验证未通过，请刷新页面后重试",
        invalid_credentials: "用户名或密码错误",
        username_taken: "该用户名已被注册",
        user_disabled: "该账号已被停用",
        invalid_username: "用户名不合法",
        weak_password: "密码强度不足",
        rate_limited: "操作太频繁，请稍后再试",
        too_many_registrations: "注册的账号太多了，请过一会儿再试",
        too_many_sign_ins: "该账号登录尝试太多，请稍后再试",
        busy: "服务器繁忙，请稍后再试",
        invalid_challenge_answer: "验证已过期，请重试",
        credentials_required: "请输入用户名和密码",
        registering: "注册中…",
        signing_in: "登录中…",
        register_failed: "注册失败",
        login_failed: "登录失败",
        expired: "已超时",
        pay_failed: "支付失败",
        cancel_failed: "取消失败",
    },
};

/// English.
pub const EN: Strings = Strings {
    html_lang: "en",
    other_code: "zh",
    other_html_lang: "zh-CN",
    other_name: "中文",
    switch_label: "Language",
    brand_tag: "flash sale",
    home_label: "seckill flash sale, home",
    nav_label: "Main",
    nav_sale: "Sale",
    nav_orders: "My orders",
    sign_in: "Sign in",
    log_out: "Log out",
    footer: "seckill · Limited stock, first come first served",
    sale_title: "Flash sale",
    sale_tagline: "Limited stock per session, first come first served",
    no_events_title: "No flash-sale sessions",
    no_events_text: "Please come back later.",
    sessions: "Sessions",
    no_products_title: "No products in this session",
    no_products_text: "Have a look at the other sessions.",
    products: "Products",
    remaining_before: "",
    remaining_after: " left",
    login_title: "Sign in",
    welcome: "Welcome to seckill",
    login_intro: "Sign in to join the flash sale",
    username: "Username",
    password: "Password",
    fill_in: "Fill in",
    register: "Register",
    register_submit: "Register and sign in",
    register_hint: "You will be signed in right away.",
    orders_count: "Orders",
    pay_hint: "Pay each awaiting order before its countdown ends",
    sandbox: "Sandbox payments: no real money moves",
    no_orders_title: "No orders yet",
    no_orders_text: "Go and grab a deal!",
    go_to_sale: "Go to the sale",
    col_order: "Order",
    col_product: "Product",
    col_qty: "Qty",
    col_total: "Total",
    col_status: "Status",
    col_created: "Created",
    col_actions: "Actions",
    awaiting_payment: "Awaiting payment",
    paid: "Paid",
    cancelled: "Cancelled",
    refunded: "Refunded",
    pay_left: "Time left to pay",
    pay: "Pay",
    cancel: "Cancel",
    payment_title: "Payment",
    order: "Order",
    pay_waiting: "Waiting for the payment to be confirmed…",
    pay_refunded: "The order was cancelled; the money went back",
    pay_cancelled: "The order was cancelled",
    script: Script {
        upcoming: "Coming soon",
        live: "On sale",
        ended: "Ended",
        paused: "Paused",
        clock_to_start: "Starts in",
        clock_to_end: "Ends in",
        clock_ended: "This session has ended",
        to_start: "Starts in ",
        to_end: "Ends in ",
        buy: "Buy now",
        buying: "Buying…",
        bought: "Got it",
        held: "Bought",
        sold_out: "Sold out",
        not_started: "Not started",
        retry_in: "Retry in {n} s",
        sold: "{n}% sold",
        almost_gone: "Almost gone",
        network_error: "Network error, please retry",
        buy_ok: "Got it! ",
        order_no: "Order ",
        pay_before: "Please pay before {t}. ",
        pay_soon: "Please pay soon. ",
        go_pay: "Pay now →",
        sold_out_msg: "Too late: sold out",
        limit_msg: "You already bought this item ",
        view_orders: "View orders →",
        not_started_msg: "Not started yet, please wait",
        ended_msg: "This sale has ended",
        paused_msg: "Buying is paused for now, please try again later",
        rate_limited_msg: "Too many requests: try again in {n} s",
        buy_failed: "Could not buy, please retry",
        guard_failed: "This browser could not be verified: reload the page and try again",
        invalid_credentials: "Wrong username or password",
        username_taken: "That username is taken",
        user_disabled: "This account has been disabled",
        invalid_username: "That username is not allowed",
        weak_password: "The password is too weak",
        rate_limited: "Too many attempts, please wait a moment",
        too_many_registrations: "Too many accounts were registered lately, please try again later",
        too_many_sign_ins: "Too many sign-ins to this account, please wait a moment",
        busy: "The server is busy, please try again in a moment",
        invalid_challenge_answer: "The check expired, please try again",
        credentials_required: "Username and password are required",
        registering: "Registering…",
        signing_in: "Signing in…",
        register_failed: "Registration failed",
        login_failed: "Sign-in failed",
        expired: "Expired",
        pay_failed: "Payment failed",
        cancel_failed: "Cancel failed",
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn lang(cookie: Option<&str>, accept: Option<&str>) -> Lang {
        let mut headers = HeaderMap::new();
        if let Some(c) = cookie {
            headers.insert(header::COOKIE, HeaderValue::from_str(c).unwrap());
        }
        if let Some(a) = accept {
            headers.insert(header::ACCEPT_LANGUAGE, HeaderValue::from_str(a).unwrap());
        }
        Lang::of(&headers)
    }

    #[test]
    fn accept_language_picks_the_preferred_of_chinese_and_english() {
        assert_eq!(lang(None, None), Lang::En);
        assert_eq!(lang(None, Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::Zh);
        assert_eq!(lang(None, Some("en-US,en;q=0.9,zh;q=0.8")), Lang::En);
        assert_eq!(lang(None, Some("fr-FR, zh-TW;q=0.5")), Lang::Zh);
        assert_eq!(lang(None, Some("en;q=0.4, zh-Hans;q=0.7")), Lang::Zh);
        assert_eq!(lang(None, Some("zh;q=0, de")), Lang::En);
        assert_eq!(lang(None, Some("zhx, fr")), Lang::En);
    }

    #[test]
    fn the_cookie_beats_accept_language_unless_it_names_no_language() {
        assert_eq!(lang(Some("a=b; seckill_lang=en"), Some("zh-CN")), Lang::En);
        assert_eq!(lang(Some("seckill_lang=zh"), Some("en")), Lang::Zh);
        assert_eq!(lang(Some("seckill_lang=fr"), Some("zh")), Lang::Zh);
    }

    #[test]
    fn the_script_strings_are_a_json_object() {
        for t in [&ZH, &EN] {
            let json: serde_json::Value = serde_json::from_str(&t.script_json()).unwrap();
            assert_eq!(json["buy"], t.script.buy);
        }
    }

    /// The sign-in page shows the error codes the script lists as its own in its language: a
    /// code listed without a string would show as `undefined`.
    #[test]
    fn every_code_the_sign_in_page_translates_has_a_string_in_each_language() {
        let script = include_str!("../../../static/app.js");
        let list = script
            .split_once("const AUTH_CODES = [")
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(list, _)| list)
            .expect("app.js lists AUTH_CODES");
        let codes: Vec<&str> = list
            .split(',')
            .map(|code| code.trim().trim_matches('\''))
            .collect();
        for code in ["too_many_registrations", "too_many_sign_ins", "busy"] {
            assert!(codes.contains(&code), "{code} is not translated");
        }
        for t in [&ZH, &EN] {
            let json: serde_json::Value = serde_json::from_str(&t.script_json()).unwrap();
            for code in &codes {
                assert!(
                    json[code].as_str().is_some_and(|s| !s.is_empty()),
                    "{} lacks {code}",
                    t.html_lang
                );
            }
        }
    }
}
