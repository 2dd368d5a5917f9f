"""Weibo's interstitial pages (busy, account frozen, passport login), written from the documented markers
(docs/SITE_RESPONSES.md §1.4) rather than copied. Like the real ones they are GBK bytes whose meta tag says utf-8, so a
client that trusts the declared charset sees mojibake and must detect them by their ASCII markers."""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["interstitial", "passport_page"]

_NOTES = {
    "busy": ("抱歉，网络繁忙", "请稍后再试，或者联系微博客服：4000 960 960（个人）"),
    "frozen": (
        '抱歉，您的帐号存在异常，目前无法进行登录。<a href="http://help.weibo.com/appeal">(20003)</a>',
        "如有疑问请访问 help.weibo.com/appeal 申诉",
    ),
}


def interstitial(kind: str, server_time_s: int) -> bytes:
    """The "sorry" page (``kind`` "busy" or "frozen") as GBK bytes that declare utf-8."""
    note, tips = _NOTES[kind]
    html = f"""<!DOCTYPE html>
<html>
<head>
<meta http-equiv="Content-Type" content="text/html; charset=utf-8" />
<title>404错误</title>
<script type="text/javascript">
var $CONFIG = {{}};
$CONFIG['islogin']='0';
$CONFIG['servertime']='{server_time_s}';
$CONFIG['bpType']='sorry';
</script>
</head>
<body class="B_weibo404">
<div class="W_main"><div class="W_error_bg"><div class="page_error">
<div class="note"><span class="W_icon icon_rederrorB"></span><em class="S_link1">{note}</em></div>
<div class="tips S_txt2">{tips}</div>
<dl class="detail"><dt class="S_txt2"><em class="S_link1" id="reload_num_span">5</em>秒之后页面自动跳转，你还可以：</dt>
<dd><a href="/">1）返回首页</a></dd></dl>
</div></div></div>
</body>
</html>
"""
    return html.encode("gbk")


def passport_page() -> bytes:
    """The 新浪通行证 login-failure page (retcode 101) as GBK bytes; ``reason`` is GBK-urlencoded."""
    reason = quote("登录名或密码错误".encode("gbk"))
    url = (
        f"http://weibo.com/ajaxlogin.php?framelogin=1&callback=parent.sinaSSOController.feedBackUrlCallBack"
        f"&retcode=101&reason={reason}"
    )
    html = f"""<html><head>
<title>新浪通行证</title>
<meta http-equiv="Content-Type" content="text/html; charset=GBK" />
<meta http-equiv="refresh" content="0; url='{url}'"/>
</head><body>
<script type="text/javascript" language="javascript">location.replace("{url}");</script>
</body></html>
"""
    return html.encode("gbk")
