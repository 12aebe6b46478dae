"""Regenerates vectors.json with the Alipay SDK on PyPI (python-alipay-sdk), an implementation
independent of ours. TEST KEYS ONLY: the keys beside this file were made for these tests.

    python3 -m venv /var/tmp/alipay-venv
    /var/tmp/alipay-venv/bin/pip install python-alipay-sdk==3.4.0
    cd src/payment/alipay/testdata && /var/tmp/alipay-venv/bin/python make_vectors.py

The canonical strings are the ones the SDK itself builds: its `_sign` and `_verify` are wrapped
to record the string they are given, so nothing here re-implements the rules under test.
"""

import json
from importlib.metadata import version

from alipay import AliPay
from alipay.exceptions import AliPayValidationError


def read(name):
    with open(name) as f:
        return f.read()


def recording(client, method, log):
    original = getattr(client, method)

    def wrapper(message, *args):
        log.append(message)
        return original(message, *args)

    setattr(client, method, wrapper)


def client(private_key, public_key):
    return AliPay(
        appid="2021000000000001",
        app_private_key_string=private_key,
        alipay_public_key_string=public_key,
        sign_type="RSA2",
    )


alipay_public = read("alipay_public_key.pem")
merchants = {form: client(read(f"app_key_{form}.pem"), alipay_public) for form in ("pkcs1", "pkcs8")}

# A page-pay request with a Chinese subject and every character a careless encoder gets wrong.
# biz_content goes in as a JSON string (UTF-8, not \u escapes), the form our server sends.
biz_content = json.dumps(
    {
        "out_trade_no": "7142835012345678901",
        "product_code": "FAST_INSTANT_TRADE_PAY",
        "subject": "秒杀 iPhone 15 & 充电器 = 1+1/2 *~%",
        "time_expire": "2026-11-24 08:15:00",
        "total_amount": "5999.00",
    },
    ensure_ascii=False,
    separators=(",", ":"),
)
request = {}
for form, merchant in merchants.items():
    signed_strings = []
    recording(merchant, "_sign", signed_strings)
    params = merchant.build_body(
        "alipay.trade.page.pay",
        biz_content,
        notify_url="https://shop.example/pay/alipay/notify",
        return_url="https://shop.example/pay/alipay/return?order=7142835012345678901&a=b c",
        timestamp="2026-11-24 08:00:01",
    )
    query = merchant.sign_data(dict(params))
    sign = merchant._sign(signed_strings[0])
    request[form] = {"string_to_sign": signed_strings[0], "query": query, "sign": sign}
assert request["pkcs1"] == request["pkcs8"], "RSA PKCS#1 v1.5 is deterministic"

# A notification as Alipay sends it, with empty parameters, signed with the "Alipay" key.
notification = {
    "gmt_create": "2026-11-24 08:00:07",
    "charset": "utf-8",
    "seller_email": "",
    "subject": "秒杀 iPhone 15 & 充电器 = 1+1/2 *~%",
    "buyer_id": "2088102177846880",
    "invoice_amount": "5999.00",
    "notify_id": "2026112400222080007084680510527799",
    "fund_bill_list": '[{"amount":"5999.00","fundChannel":"ALIPAYACCOUNT"}]',
    "notify_type": "trade_status_sync",
    "trade_status": "TRADE_SUCCESS",
    "receipt_amount": "5999.00",
    "app_id": "2021000000000001",
    "buyer_pay_amount": "5999.00",
    "sign_type": "RSA2",
    "seller_id": "2088102177649450",
    "gmt_payment": "2026-11-24 08:00:08",
    "notify_time": "2026-11-24 08:00:08",
    "passback_params": "",
    "version": "1.0",
    "out_trade_no": "7142835012345678901",
    "total_amount": "5999.00",
    "trade_no": "2026112422001446880501234567",
    "auth_app_id": "2021000000000001",
    "point_amount": "0.00",
}
alipay = client(read("alipay_key_pkcs1.pem"), alipay_public)
merchant = merchants["pkcs1"]
verified_strings = []
recording(merchant, "_verify", verified_strings)
assert not merchant.verify(dict(notification), "AAAA")
string_to_verify = verified_strings[0]
notify_sign = alipay._sign(string_to_verify)
assert merchant.verify(dict(notification), notify_sign)
changed = dict(notification, total_amount="0.01")
assert not merchant.verify(changed, notify_sign)

# A wap-pay request exactly as our client builds it for the same order (format=JSON,
# QUICK_WAP_WAY, biz_content fields in the client's order), so a Rust test can compare the
# whole pay URL with the SDK's.
wap_biz_content = json.dumps(
    {
        "out_trade_no": "7142835012345678901",
        "total_amount": "5999.00",
        "subject": "秒杀 iPhone 15 & 充电器 = 1+1/2 *~%",
        "product_code": "QUICK_WAP_WAY",
        "time_expire": "2026-11-24 08:15:00",
    },
    ensure_ascii=False,
    separators=(",", ":"),
)
wap_merchant = merchants["pkcs8"]
wap_params = wap_merchant.build_body(
    "alipay.trade.wap.pay",
    wap_biz_content,
    format="JSON",
    notify_url="https://shop.example/pay/alipay/notify",
    return_url="https://shop.example/pay/alipay/return",
    timestamp="2026-11-24 08:00:01",
)
wap_query = wap_merchant.sign_data(dict(wap_params))


# Synchronous answers as Alipay sends them: the `*_response` object's text signed with the
# "Alipay" key, then wrapped with `sign`. The SDK's own check of a synchronous answer
# (`_verify_and_return_sync_response`) must accept each, and refuse it once one byte changes.
def answer(response_type, response):
    text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
    sign = alipay._sign(text)
    body = f'{{"{response_type}":{text},"sign":"{sign}"}}'
    start = len(verified_strings)
    assert merchant._verify_and_return_sync_response(body, response_type) == response
    assert verified_strings[start:] == [text], "the SDK verified the response object's text"
    try:
        merchant._verify_and_return_sync_response(body.replace("5999", "5998", 1), response_type)
        raise AssertionError("a changed answer verified")
    except AliPayValidationError:
        pass
    return {"text": body, "response": text}


answers = {
    "paid": answer(
        "alipay_trade_query_response",
        {
            "code": "10000",
            "msg": "Success",
            "buyer_logon_id": "sza***@sandbox.com",
            "buyer_pay_amount": "5999.00",
            "buyer_user_id": "2088102177846880",
            "fund_bill_list": [{"amount": "5999.00", "fund_channel": "ALIPAYACCOUNT"}],
            "invoice_amount": "5999.00",
            "out_trade_no": "7142835012345678901",
            "point_amount": "0.00",
            "receipt_amount": "5999.00",
            "send_pay_date": "2026-11-24 08:00:08",
            "total_amount": "5999.00",
            "trade_no": "2026112422001446880501234567",
            "trade_status": "TRADE_SUCCESS",
        },
    ),
    "trade_not_exist": answer(
        "alipay_trade_query_response",
        {
            "code": "40004",
            "msg": "Business Failed",
            "sub_code": "ACQ.TRADE_NOT_EXIST",
            "sub_msg": "交易不存在",
            "buyer_pay_amount": "5999.00",
            "out_trade_no": "7142835012345678901",
        },
    ),
}

vectors = {
    "sdk": f"python-alipay-sdk {version('python-alipay-sdk')}",
    "request": {
        "params": list(params.items()),
        "string_to_sign": request["pkcs1"]["string_to_sign"],
        "sign": request["pkcs1"]["sign"],
        "query": request["pkcs1"]["query"],
    },
    "notification": {
        "params": list(dict(notification, sign=notify_sign).items()),
        "string_to_verify": string_to_verify,
    },
    "wap_request": {"params": list(wap_params.items()), "query": wap_query},
    "answers": answers,
}
with open("vectors.json", "w") as f:
    json.dump(vectors, f, ensure_ascii=False, indent=2)
    f.write("\n")
print("wrote vectors.json with", vectors["sdk"])
