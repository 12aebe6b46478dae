//! The sandbox's trades and their one-way life, as Alipay runs it: opened (`WAIT_BUYER_PAY`),
//! then paid (`TRADE_SUCCESS`) or closed unpaid, and a paid trade refunded in full is closed
//! too. Pure state: every call is handed "now", so the deadline is decided by the caller's
//! clock, and nothing here does I/O.

use crate::domain::{Millis, Money, OrderId};
use crate::payment::TradeStatus;
use std::collections::HashMap;

/// How many refund requests one trade takes: each is remembered for idempotency, so they must
/// be bounded.
const MAX_REFUNDS_PER_TRADE: usize = 50;

/// What a signed pay request asks to open.
#[derive(Debug, Clone)]
pub(super) struct Opening {
    pub subject: String,
    pub total: Money,
    /// `time_expire`: no payment at or after it.
    pub expires_at: Option<Millis>,
    /// The request's `method`: the return to the shop names it (`<method>.return`).
    pub method: &'static str,
    pub notify_url: Option<String>,
    pub return_url: Option<String>,
}

/// One trade at the sandbox.
#[derive(Debug, Clone)]
pub(super) struct SandboxTrade {
    pub opening: Opening,
    /// The gateway's own number for the trade (`trade_no`).
    pub trade_no: String,
    pub created_at: Millis,
    pub status: TradeStatus,
    pub paid_at: Option<Millis>,
    /// `out_request_no` of every accepted refund, with its amount, oldest first.
    pub refunds: Vec<(String, Money)>,
    /// When the status (or the refunded amount) last changed: the notification's time.
    pub changed_at: Millis,
    /// How many times it changed: with `trade_no`, names each notification (`notify_id`).
    pub changes: u32,
}

impl SandboxTrade {
    /// The sum of the accepted refunds.
    pub fn refunded(&self) -> Money {
        let cents = self.refunds.iter().map(|(_, amount)| amount.cents()).sum();
        Money::from_cents(cents).unwrap_or(self.opening.total)
    }

    fn change(&mut self, now: Millis) {
        self.changed_at = now;
        self.changes += 1;
    }

    /// An unpaid trade closes itself at its deadline: whoever looks after it sees it closed.
    fn expire(&mut self, now: Millis) {
        let past = self.opening.expires_at.is_some_and(|at| now >= at);
        if self.status == TradeStatus::WaitBuyerPay && past {
            self.status = TradeStatus::Closed;
            self.change(now);
        }
    }
}

/// Why an operation on a trade was refused, in Alipay's words (`sub_code`, `sub_msg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// No trade has this `out_trade_no`.
    NotExist,
    /// The trade's status does not allow it: closing a paid trade, paying or refunding an
    /// unpaid one.
    StatusError,
    /// A refund asked of a trade already refunded in full.
    HasClosed,
    /// A refund beyond what is left to refund, or of nothing.
    AmountExceeded,
    /// This `out_trade_no` was opened with another amount.
    ContextInconsistent,
    /// The book holds as many trades as it may.
    Full,
    /// The trade has taken as many refunds as it may.
    TooManyRefunds,
}

impl Refusal {
    /// Alipay's `sub_code`.
    pub fn sub_code(self) -> &'static str {
        match self {
            Self::NotExist => "ACQ.TRADE_NOT_EXIST",
            Self::StatusError => "ACQ.TRADE_STATUS_ERROR",
            Self::HasClosed => "ACQ.TRADE_HAS_CLOSE",
            Self::AmountExceeded => "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL",
            Self::ContextInconsistent => "ACQ.CONTEXT_INCONSISTENT",
            Self::Full => "ACQ.SYSTEM_ERROR",
            Self::TooManyRefunds => "ACQ.INVALID_PARAMETER",
        }
    }

    /// Alipay's `sub_msg`, with the English a sandbox user reads.
    pub fn sub_msg(self) -> &'static str {
        match self {
            Self::NotExist => "交易不存在 (no such trade)",
            Self::StatusError => "交易状态不合法 (the trade's status does not allow this)",
            Self::HasClosed => "交易已经关闭 (the trade is closed)",
            Self::AmountExceeded => "退款金额超限 (the refund exceeds what is left to refund)",
            Self::ContextInconsistent => {
                "交易信息被篡改 (this out_trade_no was opened with another amount)"
            }
            Self::Full => "系统繁忙 (the sandbox holds as many trades as it may)",
            Self::TooManyRefunds => "退款次数超限 (too many refunds for one trade)",
        }
    }
}

/// What a refund request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RefundOutcome {
    /// Money went back now (`fund_change: "Y"`).
    Refunded,
    /// This `out_request_no` was refunded before: nothing moved (`fund_change: "N"`).
    Repeated,
}

/// The trades, keyed by `out_trade_no`, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct TradeBook {
    trades: HashMap<OrderId, SandboxTrade>,
    capacity: usize,
}

impl TradeBook {
    /// An empty book that holds at most `capacity` trades.
    pub fn new(capacity: usize) -> Self {
        Self {
            trades: HashMap::new(),
            capacity,
        }
    }

    /// Opens a trade, or finds the one this `out_trade_no` opened before: an unpaid one is
    /// shown again when the amount is the same; a paid or closed one is returned as it stands.
    /// When the book is full, trades that closed without money are let go first: they hold
    /// nothing anyone can still act on.
    pub fn open(
        &mut self,
        id: OrderId,
        opening: Opening,
        trade_no: String,
        now: Millis,
    ) -> Result<&SandboxTrade, Refusal> {
        if let Some(trade) = self.trades.get_mut(&id) {
            trade.expire(now);
            if trade.status == TradeStatus::WaitBuyerPay && trade.opening.total != opening.total {
                return Err(Refusal::ContextInconsistent);
            }
        } else {
            if self.trades.len() >= self.capacity {
                self.trades.retain(|_, trade| {
                    trade.expire(now);
                    trade.status != TradeStatus::Closed || trade.paid_at.is_some()
                });
            }
            if self.trades.len() >= self.capacity {
                return Err(Refusal::Full);
            }
            let mut trade = SandboxTrade {
                opening,
                trade_no,
                created_at: now,
                status: TradeStatus::WaitBuyerPay,
                paid_at: None,
                refunds: Vec::new(),
                changed_at: now,
                changes: 0,
            };
            trade.expire(now);
            self.trades.insert(id, trade);
        }
        self.trades.get(&id).ok_or(Refusal::NotExist)
    }

    /// The trade as it stands now.
    pub fn get(&mut self, id: OrderId, now: Millis) -> Option<&SandboxTrade> {
        let trade = self.trades.get_mut(&id)?;
        trade.expire(now);
        Some(trade)
    }

    /// The buyer pays. `true` when the trade became paid now, `false` when it was paid
    /// already (a second click changes nothing); a trade closed, or past its deadline, is
    /// refused.
    pub fn pay(&mut self, id: OrderId, now: Millis) -> Result<(bool, &SandboxTrade), Refusal> {
        let trade = self.trades.get_mut(&id).ok_or(Refusal::NotExist)?;
        trade.expire(now);
        match trade.status {
            TradeStatus::WaitBuyerPay => {
                trade.status = TradeStatus::Success;
                trade.paid_at = Some(now);
                trade.change(now);
                Ok((true, trade))
            }
            TradeStatus::Success | TradeStatus::Finished => Ok((false, trade)),
            TradeStatus::Closed => Err(Refusal::HasClosed),
        }
    }

    /// `alipay.trade.close`: an unpaid trade closes (again, harmlessly, when it already has);
    /// a trade that took money cannot.
    pub fn close(&mut self, id: OrderId, now: Millis) -> Result<&SandboxTrade, Refusal> {
        let trade = self.trades.get_mut(&id).ok_or(Refusal::NotExist)?;
        trade.expire(now);
        if trade.paid_at.is_some() {
            return Err(Refusal::StatusError);
        }
        if trade.status == TradeStatus::WaitBuyerPay {
            trade.status = TradeStatus::Closed;
            trade.change(now);
        }
        Ok(trade)
    }

    /// `alipay.trade.refund` of `amount` under `request_no`. A `request_no` seen before is
    /// answered as done, whatever the amount, without moving money; refunding the whole paid
    /// amount closes the trade.
    pub fn refund(
        &mut self,
        id: OrderId,
        request_no: &str,
        amount: Money,
        now: Millis,
    ) -> Result<(RefundOutcome, &SandboxTrade), Refusal> {
        let trade = self.trades.get_mut(&id).ok_or(Refusal::NotExist)?;
        trade.expire(now);
        if trade.refunds.iter().any(|(no, _)| no == request_no) {
            return Ok((RefundOutcome::Repeated, trade));
        }
        if trade.paid_at.is_none() {
            return Err(Refusal::StatusError);
        }
        if trade.status == TradeStatus::Closed {
            return Err(Refusal::HasClosed);
        }
        let left = trade.opening.total.cents() - trade.refunded().cents();
        if amount.cents() == 0 || amount.cents() > left {
            return Err(Refusal::AmountExceeded);
        }
        if trade.refunds.len() >= MAX_REFUNDS_PER_TRADE {
            return Err(Refusal::TooManyRefunds);
        }
        trade.refunds.push((request_no.to_owned(), amount));
        if amount.cents() == left {
            trade.status = TradeStatus::Closed;
        }
        trade.change(now);
        Ok((RefundOutcome::Refunded, trade))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_795_479_300_000;
    const DEADLINE: Millis = NOW + 15 * 60_000;

    fn opening(cents: i64) -> Opening {
        Opening {
            subject: "iPhone".to_owned(),
            total: Money::from_cents(cents).unwrap(),
            expires_at: Some(DEADLINE),
            method: "alipay.trade.page.pay",
            notify_url: None,
            return_url: None,
        }
    }

    fn open(
        book: &mut TradeBook,
        id: i64,
        cents: i64,
        now: Millis,
    ) -> Result<TradeStatus, Refusal> {
        let trade_no = format!("T{id}");
        Ok(book
            .open(OrderId(id), opening(cents), trade_no, now)?
            .status)
    }

    fn yuan(cents: i64) -> Money {
        Money::from_cents(cents).unwrap()
    }

    #[test]
    fn an_unpaid_trade_reopens_with_its_amount_only_and_closes_at_its_deadline() {
        let mut book = TradeBook::new(10);
        assert_eq!(open(&mut book, 1, 100, NOW), Ok(TradeStatus::WaitBuyerPay));
        assert_eq!(
            open(&mut book, 1, 100, NOW + 1),
            Ok(TradeStatus::WaitBuyerPay)
        );
        assert_eq!(
            open(&mut book, 1, 99, NOW + 2),
            Err(Refusal::ContextInconsistent)
        );
        let status = |book: &mut TradeBook, now| book.get(OrderId(1), now).unwrap().status;
        assert_eq!(status(&mut book, DEADLINE - 1), TradeStatus::WaitBuyerPay);
        assert_eq!(status(&mut book, DEADLINE), TradeStatus::Closed);
        assert_eq!(
            book.pay(OrderId(1), DEADLINE).unwrap_err(),
            Refusal::HasClosed
        );
        assert_eq!(open(&mut book, 1, 99, DEADLINE), Ok(TradeStatus::Closed));
    }

    #[test]
    fn paying_twice_changes_the_trade_once() {
        let mut book = TradeBook::new(10);
        open(&mut book, 1, 100, NOW).unwrap();
        assert!(book.pay(OrderId(1), NOW + 5).unwrap().0);
        assert!(!book.pay(OrderId(1), NOW + 6).unwrap().0);
        let trade = book.get(OrderId(1), DEADLINE + 1).unwrap();
        assert_eq!(
            trade.status,
            TradeStatus::Success,
            "paid trades do not expire"
        );
        assert_eq!((trade.paid_at, trade.changes), (Some(NOW + 5), 1));
        assert_eq!(book.pay(OrderId(2), NOW).unwrap_err(), Refusal::NotExist);
    }

    #[test]
    fn close_takes_unpaid_trades_only() {
        let mut book = TradeBook::new(10);
        open(&mut book, 1, 100, NOW).unwrap();
        open(&mut book, 2, 100, NOW).unwrap();
        assert_eq!(
            book.close(OrderId(1), NOW).unwrap().status,
            TradeStatus::Closed
        );
        assert_eq!(book.close(OrderId(1), NOW).unwrap().changes, 1);
        assert_eq!(book.pay(OrderId(1), NOW).unwrap_err(), Refusal::HasClosed);
        book.pay(OrderId(2), NOW).unwrap();
        assert_eq!(
            book.close(OrderId(2), NOW).unwrap_err(),
            Refusal::StatusError
        );
        assert_eq!(book.close(OrderId(3), NOW).unwrap_err(), Refusal::NotExist);
    }

    #[test]
    fn refunds_are_idempotent_bounded_by_the_amount_and_close_the_trade_when_whole() {
        let mut book = TradeBook::new(10);
        open(&mut book, 1, 100, NOW).unwrap();
        let refund = |book: &mut TradeBook, no: &str, cents| {
            book.refund(OrderId(1), no, yuan(cents), NOW)
                .map(|(outcome, trade)| (outcome, trade.refunded().cents(), trade.status))
        };
        assert_eq!(refund(&mut book, "r1", 100), Err(Refusal::StatusError));
        book.pay(OrderId(1), NOW).unwrap();
        assert_eq!(refund(&mut book, "r1", 0), Err(Refusal::AmountExceeded));
        assert_eq!(refund(&mut book, "r1", 101), Err(Refusal::AmountExceeded));
        let partly = (RefundOutcome::Refunded, 40, TradeStatus::Success);
        assert_eq!(refund(&mut book, "r1", 40), Ok(partly));
        let again = (RefundOutcome::Repeated, 40, TradeStatus::Success);
        assert_eq!(refund(&mut book, "r1", 40), Ok(again));
        assert_eq!(refund(&mut book, "r2", 61), Err(Refusal::AmountExceeded));
        let whole = (RefundOutcome::Refunded, 100, TradeStatus::Closed);
        assert_eq!(refund(&mut book, "r2", 60), Ok(whole));
        let again = (RefundOutcome::Repeated, 100, TradeStatus::Closed);
        assert_eq!(refund(&mut book, "r2", 60), Ok(again));
        assert_eq!(refund(&mut book, "r3", 1), Err(Refusal::HasClosed));
    }

    #[test]
    fn one_trade_takes_a_bounded_number_of_refunds() {
        let mut book = TradeBook::new(10);
        open(&mut book, 1, 10_000, NOW).unwrap();
        book.pay(OrderId(1), NOW).unwrap();
        for n in 0..MAX_REFUNDS_PER_TRADE {
            book.refund(OrderId(1), &n.to_string(), yuan(1), NOW)
                .unwrap();
        }
        let refused = book.refund(OrderId(1), "one more", yuan(1), NOW);
        assert_eq!(refused.unwrap_err(), Refusal::TooManyRefunds);
    }

    #[test]
    fn a_full_book_lets_go_of_unpaid_closed_trades_and_refuses_beyond() {
        let mut book = TradeBook::new(2);
        open(&mut book, 1, 100, NOW).unwrap();
        open(&mut book, 2, 100, NOW).unwrap();
        assert_eq!(open(&mut book, 3, 100, NOW), Err(Refusal::Full));
        book.pay(OrderId(1), NOW).unwrap();
        book.close(OrderId(2), NOW).unwrap();
        assert_eq!(open(&mut book, 3, 100, NOW), Ok(TradeStatus::WaitBuyerPay));
        assert!(
            book.get(OrderId(2), NOW).is_none(),
            "the closed trade was let go"
        );
        assert_eq!(
            book.get(OrderId(1), NOW).unwrap().status,
            TradeStatus::Success
        );
        assert_eq!(open(&mut book, 4, 100, NOW), Err(Refusal::Full));
    }
}
