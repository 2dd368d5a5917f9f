"""Synthetic but format-faithful responses for every source, generated (never copied from real sites).

They serve two users: the client benchmark (``bench/client.py`` times parse + fingerprint per page over
``bench_cases()``), and the parser tests (bulk pages of any size). Each builder follows the formats in
docs/SITE_FORMATS.md and docs/SOURCES.md: a 15-post ``mbloglist`` chunk (three make a 45-post page), a getIndex page
with a pinned post, a weibo.com ``mymblog`` page, an ECSHOP goods page or ``comment.php`` envelope with 5-10
comments, and a JD JSONP page of 10 comments. Everything is deterministic for a given ``seed``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from crawler_client.sources.base import FetchedPage, PageRequest
from icecrawler.clock import BEIJING
from icecrawler.models import Task, TaskKind

__all__ = [
    "BenchCase",
    "bench_cases",
    "ecshop_comment_json",
    "ecshop_comments_html",
    "ecshop_goods_page",
    "jd_comments",
    "mbloglist_chunk",
    "mbloglist_page",
    "mobile_timeline",
    "web_timeline",
    "wire_json",
]

#: The fixed "fetch time" the samples are dated against: 2021-07-06 12:00:00 +08:00.
SAMPLE_NOW_MS = int(datetime(2021, 7, 6, 12, 0, tzinfo=BEIJING).timestamp() * 1000)

_WORDS = (
    "今天",
    "天气",
    "不错",
    "我们",
    "一起",
    "去",
    "看",
    "比赛",
    "加油",
    "晚安",
    "新品",
    "发布",
    "感谢",
    "大家",
    "支持",
    "质量",
    "很好",
    "物流",
    "很快",
    "包装",
    "完好",
    "推荐",
    "购买",
    "性价比",
    "高",
)
_NICKS = ("余丰慧", "小明同学", "j***y", "王**", "快乐的鱼", "匿名用户", "TomLee", "阿花")


def wire_json(obj: object) -> bytes:
    """JSON as PHP/Weibo put it on the wire: compact, ``\\uXXXX`` for non-ASCII and ``\\/`` for slashes."""
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/").encode("ascii")


def _sentence(rng: random.Random, words: int = 12) -> str:
    """Deterministic Chinese filler text."""
    return "".join(rng.choice(_WORDS) for _ in range(words))


def _weibo_display(moment: datetime) -> str:
    """The date link's text for an older post (``M月D日 HH:MM``)."""
    return f"{moment.month}月{moment.day}日 {moment:%H:%M}"


def _pc_count(value: int, label: str) -> str:
    """Weibo PC shows the label instead of 0."""
    return str(value) if value else label


def _pc_post(
    rng: random.Random,
    uid: int,
    nick: str,
    mid: int,
    moment: datetime,
    *,
    repost_of: int = 0,
    truncated: bool = False,
    pictures: int = 0,
) -> str:
    """One ``feed_list_item`` as the v6 profile feed renders it (docs/SITE_FORMATS.md §1.3)."""
    bid = f"F{mid % 10**8:08d}"[:9]
    ms = int(moment.timestamp() * 1000)
    text = (
        escape(_sentence(rng)) + ' <a class="a_topic" href="//s.weibo.com/weibo?q=%23话题%23" '
        'target="_blank">#话题#</a>'
    )
    if truncated:
        text += (
            f' ...<a target="_blank" href="/{uid}/{bid}" class="WB_text_opt" action-type="fl_unfold" '
            f'action-data="mid={mid}&is_settop&is_sethot&is_setfanstop&is_setyunying">展开全文'
            '<i class="W_ficon ficon_arrow_down">c</i></a>'
        )
    media = ""
    if pictures:
        lis = "".join(
            f'<li class="WB_pic li_{i + 1} S_bg1 S_line2 bigcursor" action-type="fl_pics">'
            f'<img src="//wx{i % 4 + 1}.sinaimg.cn/thumb150/0060lm7Tly1pic{mid % 1000:03d}{i}.jpg"></li>'
            for i in range(pictures)
        )
        media = (
            f'<div class="WB_media_wrap clearfix" node-type="feed_content"><div class="media_box">'
            f'<ul class="WB_media_a clearfix" action-type="fl_pics" node-type="feed_list_media_prev">{lis}'
            f"</ul></div></div>"
        )
    forward = ""
    forward_attrs = ""
    tbinfo = f"ouid={uid}"
    if repost_of:
        ouid = uid + 7
        tbinfo += f"&rouid={ouid}"
        forward_attrs = f' isforward="1" omid="{repost_of}"'
        forward = (
            f'<div class="WB_feed_expand"><div class="WB_expand S_bg1" node-type="feed_list_forwardContent">'
            f'<div class="WB_info"><a class="W_fb S_txt1" usercard="id={ouid}" title="原作者">@原作者</a>'
            f'</div><div class="WB_text" node-type="feed_list_reason">{escape(_sentence(rng, 6))}</div>'
            f'<div class="WB_func clearfix"><div class="WB_handle W_fr"><ul class="clearfix">'
            f'<li><span class="line S_line1"><a class="S_txt2" action-type="fl_forward"><span>'
            f'<em class="W_ficon ficon_forward S_ficon">\ue607</em><em>999</em></span></a></span></li>'
            f'</ul></div><div class="WB_from S_txt2"><a class="S_txt2" href="/{ouid}/Gxyz" '
            f'node-type="feed_list_item_date" date="{ms - 3600_000}" name="{repost_of}">1小时前</a>'
            f"</div></div></div></div>"
        )
    reposts, comments, likes = rng.choice((0, 3, 120)), rng.choice((0, 5)), rng.choice((0, 4, 2048))
    return (
        f'<div class="WB_cardwrap WB_feed_type S_bg2 WB_feed_like" tbinfo="{tbinfo}" diss-data="" mid="{mid}"'
        f'{forward_attrs} action-type="feed_list_item">\n'
        f'<div class="WB_feed_detail clearfix" node-type="feed_content">'
        f'<div class="WB_face W_fl"><div class="face"><a target="_blank" class="W_face_radius" href="/u/{uid}" '
        f'title="{nick}"><img usercard="id={uid}" title="{nick}" alt="" width="50" height="50" '
        f'src="//tva1.sinaimg.cn/crop.0.0.180.180.50/{uid}.jpg" class="W_face_radius"></a></div></div>'
        f'<div class="WB_detail"><div class="WB_info"><a target="_blank" class="W_f14 W_fb S_txt1" '
        f'nick-name="{nick}" title="{nick}" href="/u/{uid}" usercard="id={uid}&type=0&refer_flag=0000015010_">'
        f'{nick}</a></div><div class="WB_from S_txt2"><a target="_blank" '
        f'href="/{uid}/{bid}?from=page_100505_profile&wvr=6&mod=weibotime" title="{moment:%Y-%m-%d %H:%M}" '
        f'date="{ms}" class="S_txt2" node-type="feed_list_item_date" name="{mid}">{_weibo_display(moment)}</a> '
        f'来自 <a class="S_txt2" action-type="app_source" target="_blank" rel="nofollow">微博 weibo.com</a></div>'
        f'<div class="WB_text W_f14" node-type="feed_list_content" nick-name="{nick}">\n                  '
        f"{text}</div>{media}{forward}</div></div>"
        f'<div class="WB_feed_handle"><div class="WB_handle"><ul class="WB_row_line WB_row_r4 clearfix S_line2">'
        f'<li><a href="javascript:void(0);" class="S_txt2" action-type="fl_forward"><span class="pos">'
        f'<span class="line S_line1"><span><em class="W_ficon ficon_forward S_ficon">\ue607</em>'
        f"<em>{_pc_count(reposts, '转发')}</em></span></span></span></a></li>"
        f'<li><a href="javascript:void(0);" class="S_txt2" action-type="fl_comment"><span class="pos">'
        f'<span class="line S_line1"><span><em class="W_ficon ficon_repeat S_ficon">\ue608</em>'
        f"<em>{_pc_count(comments, '评论')}</em></span></span></span></a></li>"
        f'<li><a href="javascript:void(0);" class="S_txt2" action-type="fl_like"><span class="pos">'
        f'<span class="line S_line1"><span node-type="like_status"><em class="W_ficon ficon_praised S_txt2">ñ'
        f"</em><em>{_pc_count(likes, '赞')}</em></span></span></span></a></li></ul></div></div></div>\n"
    )


def mbloglist_chunk(
    uid: int = 1163218074,
    page: int = 1,
    chunk: int = 0,
    *,
    posts: int = 15,
    count_page: int = 18,
    newest_mid: int = 4102647604266970,
    seed: int = 0,
    domain: str = "100505",
) -> bytes:
    """One ``mbloglist`` response: ``posts`` items (reposts, 展开全文, pictures, zero counts mixed in), the
    lazy-load placeholder for chunks 0/1, or the pager (``countPage``) for chunk 2."""
    rng = random.Random(seed * 1000 + page * 10 + chunk)
    offset = ((page - 1) * 3 + chunk) * posts
    start = datetime.fromtimestamp(SAMPLE_NOW_MS / 1000, tz=BEIJING) - timedelta(hours=3)
    nick = _NICKS[uid % len(_NICKS)]
    html = "".join(
        _pc_post(
            rng,
            uid,
            nick,
            newest_mid - (offset + i) * 1_000_003,
            start - timedelta(hours=offset + i),
            repost_of=(newest_mid - 77_000_000 - i) if i % 5 == 3 else 0,
            truncated=i % 7 == 2,
            pictures=i % 4,
        )
        for i in range(posts)
    )
    if chunk < 2:
        html += (
            '<div class="WB_cardwrap S_bg2" node-type="lazyload"><div class="WB_empty WB_empty_narrow">'
            '<div class="WB_innerwrap"><div class="empty_con clearfix"><p class="text">'
            '<i class="W_loading"></i>正在加载中，请稍候...</p></div></div></div></div>'
        )
    elif posts:
        links = "".join(
            f'<li><a bpfilter="page" href="/p/{domain}{uid}/home?is_search=0&visible=0&is_all=1'
            f'&is_tag=0&profile_ftype=1&page={k}#feedtop">第&nbsp;{k}&nbsp;页</a></li>'
            for k in range(1, count_page + 1)
        )
        nxt = (
            (
                f'<a bpfilter="page" class="page next S_txt1 S_line1" href="/p/{domain}{uid}/home?is_search=0'
                f'&page={page + 1}#feedtop"><span>下一页</span></a>'
            )
            if page < count_page
            else ""
        )
        html += (
            f'<div class="WB_cardwrap S_bg2" node-type="feed_list_page"><div class="W_pages">'
            f'<span class="list"><a action-type="feed_list_page_more" action-data="currentPage={page}'
            f'&countPage={count_page}" href="javascript:void(0);" class="page S_txt1" bpfilter="page_frame">'
            f'第{page}页<em class="W_ficon ficon_arrow_down S_ficon">c</em></a>'
            f'<div class="layer_menu_list W_scroll" action-type="feed_list_page_morelist"><ul>{links}</ul>'
            f"</div></span>{nxt}</div></div>"
        )
    return wire_json({"code": "100000", "msg": "", "data": html})


def mbloglist_page(uid: int = 1163218074, page: int = 1, *, count_page: int = 18, seed: int = 0) -> list[bytes]:
    """The three chunks (15 + 15 + 15 = 45 posts) of visible page ``page``."""
    return [mbloglist_chunk(uid, page, chunk, count_page=count_page, seed=seed) for chunk in range(3)]


def mobile_timeline(
    uid: int = 1907518591,
    *,
    posts: int = 10,
    pinned: bool = True,
    cursor: str = "page",
    next_value: int = 2,
    newest_mid: int = 4655758022804664,
    seed: int = 0,
) -> bytes:
    """A getIndex timeline page: a pinned older post first (optional), reposts, a long text, string counts;
    ``cursor`` is "page", "since_id" or "" (last page)."""
    rng = random.Random(seed)
    now = datetime.fromtimestamp(SAMPLE_NOW_MS / 1000, tz=BEIJING)
    user = {
        "id": uid,
        "screen_name": _NICKS[uid % len(_NICKS)],
        "profile_url": f"https://m.weibo.cn/u/{uid}",
        "verified": True,
        "followers_count": "145.5万",
        "statuses_count": 582,
        "gender": "f",
    }
    cards = []
    for i in range(posts):
        is_pinned = pinned and i == 0
        mid = newest_mid - 80_000_000_000 if is_pinned else newest_mid - i * 30_000_000
        moment = now - timedelta(days=40) if is_pinned else now - timedelta(hours=2 * i)
        mblog: dict[str, object] = {
            "visible": {"type": 0, "list_id": 0},
            "created_at": moment.strftime("%a %b %d %H:%M:%S +0800 %Y"),
            "id": str(mid),
            "mid": str(mid),
            "can_edit": False,
            "text": escape(_sentence(rng)) + "<br />"
            '<span class="url-icon"><img alt=[doge] src="https://h5.sinaimg.cn/m/emoticon/icon/d_doge.png" '
            'style="width:1em; height:1em;" /></span>',
            "textLength": 40,
            "source": "iPhone客户端",
            "favorited": False,
            "user": user,
            "reposts_count": rng.choice((0, 12, "100万+")),
            "comments_count": rng.choice((3, 77)),
            "attitudes_count": rng.choice((5, "1.2万")),
            "pending_approval_count": 0,
            "isLongText": i == 2,
            "bid": f"Kn{mid % 10**7:07d}",
            "pic_num": i % 3,
            "pics": [
                {
                    "pid": f"p{mid}{k}",
                    "url": f"https://wx1.sinaimg.cn/orj360/p{mid}{k}.jpg",
                    "size": "orj360",
                    "large": {
                        "size": "large",
                        "url": f"https://wx1.sinaimg.cn/large/p{mid}{k}.jpg",
                        "geo": {"width": "1080", "height": "1440", "croped": False},
                    },
                }
                for k in range(i % 3)
            ],
        }
        if is_pinned:
            mblog.update({"isTop": 1, "title": {"text": "置顶", "base_color": 1}})
        if i == 2:
            mblog["text"] = f'{escape(_sentence(rng, 30))} ...<a href="/status/{mid}">全文</a>'
        if i % 4 == 3:
            mblog["retweeted_status"] = {
                "id": str(mid - 9_000_000),
                "mid": str(mid - 9_000_000),
                "text": escape(_sentence(rng)),
                "user": user,
                "created_at": "06-27",
            }
        cards.append(
            {
                "card_type": 9,
                "itemid": f"107603{uid}_-_{mid}",
                "scheme": f"https://m.weibo.cn/status/Kn?mblogid=Kn&luicode=10000011&lfid=107603{uid}",
                "mblog": mblog,
            }
        )
    info: dict[str, object] = {"containerid": f"107603{uid}", "v_p": 42, "show_style": 1, "total": 582}
    if cursor:
        info[cursor] = next_value
    return wire_json(
        {
            "ok": 1,
            "data": {
                "cardlistInfo": info,
                "cards": cards,
                "scheme": f"sinaweibo://cardlist?containerid=107603{uid}",
                "showAppTips": 0,
            },
        }
    )


def web_timeline(
    uid: int = 1669879400,
    *,
    posts: int = 20,
    pinned: bool = True,
    since_id: bool = True,
    newest_mid: int = 4655758022804664,
    seed: int = 0,
) -> bytes:
    """A weibo.com ``/ajax/statuses/mymblog`` page: a pinned older post first (optional), ``pic_ids`` with a
    ``pic_infos`` map, reposts, a long text, ``text`` and ``text_raw``, string counts and ``since_id``."""
    rng = random.Random(seed)
    now = datetime.fromtimestamp(SAMPLE_NOW_MS / 1000, tz=BEIJING)
    user = {
        "id": uid,
        "idstr": str(uid),
        "pc_new": 7,
        "screen_name": _NICKS[uid % len(_NICKS)],
        "profile_url": f"/u/{uid}",
        "verified": True,
        "verified_type": 0,
        "mbrank": 6,
        "mbtype": 12,
        "avatar_hd": f"https://tvax1.sinaimg.cn/crop.0.0.180.180.1024/{uid:x}ly8g.jpg",
    }
    rows = []
    for i in range(posts):
        is_pinned = pinned and i == 0
        mid = newest_mid - 80_000_000_000 if is_pinned else newest_mid - i * 30_000_000
        moment = now - timedelta(days=40) if is_pinned else now - timedelta(hours=2 * i)
        words = _sentence(rng, 30 if i == 2 else 12)
        pids = [f"{uid:x}ly1h{mid % 10**8:08d}{k}" for k in range(i % 4)]
        mblog: dict[str, object] = {
            "visible": {"type": 0, "list_id": 0},
            "created_at": moment.strftime("%a %b %d %H:%M:%S +0800 %Y"),
            "id": mid,
            "idstr": str(mid),
            "mid": str(mid),
            "mblogid": f"Kn{mid % 10**7:07d}",
            "user": user,
            "can_edit": False,
            "text": escape(words) + ' <img alt="[doge]" title="[doge]" src="https://face.t.sinajs'
            '.cn/t4/appstyle/expression/ext/normal/a1/2018new_doge02_org.png" />',
            "text_raw": words + " [doge]",
            "textLength": 40,
            "source": "iPhone客户端",
            "favorited": False,
            "pic_ids": pids,
            "pic_num": len(pids),
            "pic_infos": {
                pid: {
                    size: {"url": f"https://wx1.sinaimg.cn/{path}/{pid}.jpg", "width": 1080, "height": 1440}
                    for size, path in (("thumbnail", "wap180"), ("large", "orj960"), ("largest", "large"))
                }
                for pid in pids
            },
            "reposts_count": rng.choice((0, 12, "100万+")),
            "comments_count": rng.choice((3, 77)),
            "attitudes_count": rng.choice((5, "1.2万")),
            "isLongText": i == 2,
            "mblogtype": 0,
            "region_name": "发布于 北京",
        }
        if is_pinned:
            mblog.update({"isTop": 1, "mblogtype": 2, "title": {"text": "置顶", "base_color": 1}})
        if i % 4 == 3:
            original = mid - 9_000_000
            mblog["retweeted_status"] = {
                "id": original,
                "idstr": str(original),
                "mid": str(original),
                "mblogid": "KnOrig",
                "text": escape(_sentence(rng)),
                "user": user,
                "created_at": moment.strftime("%a %b %d %H:%M:%S +0800 %Y"),
            }
        rows.append(mblog)
    data: dict[str, object] = {"list": rows, "status_visible": 0, "topicList": [], "total": 582}
    if since_id:
        data["since_id"] = f"{newest_mid - posts * 30_000_000}kp2"
    return json.dumps({"ok": 1, "data": data}, ensure_ascii=False, separators=(",", ":")).encode()


def ecshop_comments_html(
    goods_id: int = 42, *, comments: int = 5, page: int = 1, record_count: int = 23, page_count: int = 5, seed: int = 0
) -> str:
    """``library/comments_list.lbi`` rendered (default theme, docs/SITE_FORMATS.md §3.2), with an admin reply."""
    rng = random.Random(seed * 100 + page)
    now = datetime.fromtimestamp(SAMPLE_NOW_MS / 1000, tz=BEIJING)
    items = []
    for i in range(comments):
        moment = now - timedelta(hours=(page - 1) * comments + i, minutes=i)
        reply = '<p><font class="f1">管理员：</font>感谢您的支持！</p>' if i == 1 else ""
        user = "" if i == 3 else rng.choice(_NICKS[:5])
        items.append(
            f'<li class="word"><font class="f2">{user or "匿名用户"}</font> <font class="f3">'
            f'( {moment:%Y-%m-%d %H:%M:%S} )</font><br /><img src="themes/default/images/'
            f'stars{5 - i % 5}.gif" alt="" /><p>{escape(_sentence(rng))}<br />{escape(_sentence(rng, 4))}'
            f"</p>{reply}</li>"
        )
    body = "".join(items) or "<li>暂时还没有任何用户评论</li>"

    def link(target: int, enabled: bool) -> str:
        """A pager link: ``gotoPage`` when enabled, ``javascript:;`` otherwise (as ``assign_comment``)."""
        return f"javascript:gotoPage({target},{goods_id},0)" if enabled else "javascript:;"

    pager = (
        f'<div id="pagebar" class="f_r"><form name="selectPageForm" action="/goods.php" method="get">'
        f'<div id="pager">总计 {record_count} 个记录，共 {page_count} 页。 <span> '
        f'<a href="{link(1, page > 1)}">第一页</a> <a href="{link(page - 1, page > 1)}">上一页</a> '
        f'<a href="{link(page + 1, page < page_count)}">下一页</a> '
        f'<a href="{link(page_count, page < page_count)}">最末页</a> </span></div></form></div>'
    )
    return (
        f'<meta http-equiv="Content-Type" content="text/html; charset=utf-8"><!--用户评论 START-->'
        f'<div class="box"><div class="box_1"><h3><span class="text">用户评论</span>(共<font class="f1">'
        f'{record_count}</font>条评论)</h3><div class="boxCenterList clearfix" style="height:1%;">'
        f'<ul class="comments">{body}</ul>{pager}<div class="blank5"></div><div class="commentsList">'
        f'<form action="javascript:;" onsubmit="submitComment(this)" method="post" name="commentForm" '
        f'id="commentForm"><textarea name="content" class="inputBorder"></textarea><input type="hidden" '
        f'name="cmt_type" value="0" /><input type="hidden" name="id" value="{goods_id}" /></form></div></div>'
        f"</div></div><!--用户评论 END-->"
    )


def ecshop_goods_page(
    goods_id: int = 42, *, comments: int = 5, record_count: int = 23, page_count: int = 5, seed: int = 0
) -> bytes:
    """``goods.php?id=N`` with page 1 of the comments already rendered into ``#ECS_COMMENT``."""
    fragment = ecshop_comments_html(
        goods_id, comments=comments, record_count=record_count, page_count=page_count, seed=seed
    )
    return (
        f'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" '
        f'"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd"><html><head><meta http-equiv="Content-Type"'
        f' content="text/html; charset=utf-8" /><title>商品 {goods_id}_ECSHOP演示站</title></head><body>'
        f'<div id="ECS_MEMBERZONE">欢迎光临本店，<a href="user.php">登录</a></div><div class="goodsInfo">'
        f'<h1>商品 {goods_id}</h1></div><div id="ECS_COMMENT">{fragment}</div></body></html>'
    ).encode()


def ecshop_comment_json(
    goods_id: int = 42,
    page: int = 2,
    *,
    comments: int = 5,
    record_count: int = 23,
    page_count: int = 5,
    seed: int = 0,
    gbk: bool = False,
    pages_key: bool = False,
) -> bytes:
    """``comment.php?act=gotopage``: ``{error, message, content}`` (json_encode), or ECSHOP's own raw GBK
    encoder with ``gbk=True``; ``pages_key`` adds the ``pages`` key some forks send."""
    doc: dict[str, object] = {
        "error": 0,
        "message": "您的评论已成功发表, 感谢您的参与!",
        "content": ecshop_comments_html(
            goods_id, comments=comments, page=page, record_count=record_count, page_count=page_count, seed=seed
        ),
    }
    if pages_key:
        doc["pages"] = '<div id="pager"><a href="javascript:;">1</a></div>'
    if gbk:
        return json.dumps(doc, ensure_ascii=False).encode("gbk")
    return wire_json(doc)


def jd_comments(
    sku: int = 100012043978,
    *,
    comments: int = 10,
    page: int = 0,
    max_page: int = 100,
    jsonp: bool = True,
    seed: int = 0,
) -> bytes:
    """``productPageComments.action``: int64 ids, entity-laden content, ``*CountStr`` summary
    (docs/SITE_FORMATS.md §4.2)."""
    rng = random.Random(seed * 1000 + page)
    now = datetime.fromtimestamp(SAMPLE_NOW_MS / 1000, tz=BEIJING)
    rows = []
    for i in range(comments):
        moment = now - timedelta(hours=page * comments + i)
        rows.append(
            {
                "id": 21739216866 - page * comments - i,
                "topped": 0,
                "guid": f"{rng.getrandbits(64):016x}",
                "content": _sentence(rng)
                + ("，温度 25&deg;C &amp; 湿度" if i == 0 else "")
                + ("\n追评" if i == 1 else ""),
                "creationTime": f"{moment:%Y-%m-%d %H:%M:%S}",
                "isDelete": False,
                "isTop": False,
                "userImageUrl": "storage.360buyimg.com/i.imageUpload/abc.jpg",
                "topped2": 0,
                "replyCount": i % 2,
                "score": 5 - i % 3,
                "imageStatus": 1,
                "usefulVoteCount": i,
                "userClient": 4,
                "discussionId": 0,
                "imageCount": 1,
                "images": [
                    {"id": -1 - i, "imgUrl": "//img30.360buyimg.com/n0/s128x96_jfs/t1.jpg", "imgTitle": "", "status": 0}
                ],
                "nickname": rng.choice(("j***y", "王**5", "a***3")),
                "referenceId": str(sku),
                "referenceName": "商品名称",
                "referenceTime": f"{moment - timedelta(days=3):%Y-%m-%d %H:%M:%S}",
                "productColor": "黑色",
                "productSize": "",
                "productSales": "[]",
                "location": "广东",
                "days": 3,
                "afterDays": 0,
                "plusAvailable": 201,
                "anonymousFlag": 1,
                "mobileVersion": "",
                "replies": [],
                "extMap": {"buyCount": 0},
                "aesPin": None,
            }
        )
    doc = {
        "jwotestProduct": None,
        "score": 0,
        "comments": rows,
        "soType": 6,
        "csv": "comment.1",
        "imageListCount": 500,
        "hotCommentTagStatistics": [],
        "testId": "cmt",
        "vTagStatistics": None,
        "maxPage": max_page,
        "productCommentSummary": {
            "skuId": sku,
            "productId": sku,
            "commentCount": 0,
            "commentCountStr": "100万+",
            "goodRate": 0.97,
        },
        "productAttr": None,
    }
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    return b"fetchJSON_comment98(" + body + b");" if jsonp else body


@dataclass
class BenchCase:
    """One page to time: ``source.parse(task, request, page, now_ms)`` with ``get_source(source)``."""

    name: str
    source: str
    task: Task
    request: PageRequest
    page: FetchedPage
    now_ms: int = SAMPLE_NOW_MS


def _case(name: str, source: str, kind: TaskKind, target: str, request: PageRequest, body: bytes) -> BenchCase:
    """A BenchCase for a task of ``kind`` on ``source``."""
    task = Task(id=f"{kind.value}:{source}:{target}", kind=kind, source=source, target=target)
    return BenchCase(name, source, task, request, FetchedPage(url=request.url, status=200, headers={}, body=body))


def bench_cases(seed: int = 0) -> list[BenchCase]:
    """One realistic page per source/shape: the 3 chunks of a 45-post PC page, a 10-post mobile page, a
    20-post weibo.com JSON page, an ECSHOP goods page and 10-review ``comment.php`` page, and a 10-review JD page."""
    base = "http://bench.invalid"
    uid, mobile_uid = 1163218074, 1907518591
    cases = [
        _case(
            f"weibo_pc/chunk{chunk}",
            "weibo_pc",
            TaskKind.WeiboUser,
            str(uid),
            PageRequest(url=f"{base}/p/aj/v6/mblog/mbloglist", params={"page": "1"}, state={"chunk": str(chunk)}),
            body,
        )
        for chunk, body in enumerate(mbloglist_page(uid, 1, seed=seed))
    ]
    cases.append(
        _case(
            "weibo_mobile/page",
            "weibo_mobile",
            TaskKind.WeiboUser,
            str(mobile_uid),
            PageRequest(url=f"{base}/api/container/getIndex", params={"containerid": f"107603{mobile_uid}"}),
            mobile_timeline(mobile_uid, seed=seed),
        )
    )
    cases.append(
        _case(
            "weibo_web/page",
            "weibo_web",
            TaskKind.WeiboUser,
            str(mobile_uid),
            PageRequest(url=f"{base}/ajax/statuses/mymblog", params={"uid": str(mobile_uid), "page": "1"}),
            web_timeline(mobile_uid, seed=seed),
        )
    )
    cases.append(
        _case(
            "ecshop/goods",
            "ecshop",
            TaskKind.ProductReviews,
            "42",
            PageRequest(url=f"{base}/goods.php", params={"id": "42"}),
            ecshop_goods_page(42, seed=seed),
        )
    )
    cases.append(
        _case(
            "ecshop/comment10",
            "ecshop",
            TaskKind.ProductReviews,
            "42",
            PageRequest(url=f"{base}/comment.php?act=gotopage&page=2&id=42&type=0&1", page=2),
            ecshop_comment_json(42, 2, comments=10, seed=seed),
        )
    )
    cases.append(
        _case(
            "jd/page",
            "jd",
            TaskKind.ProductReviews,
            "100012043978",
            PageRequest(url=f"{base}/comment/productPageComments.action", params={"page": "0"}),
            jd_comments(seed=seed),
        )
    )
    return cases
