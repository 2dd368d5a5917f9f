"""weibo.com (desktop) under ``/pc``: the v6 ``/p/aj/v6/mblog/mbloglist`` AJAX feed, the profile page
``/u/{uid}?page=N`` (chunk 1 of a visible page inside ``FM.view``) and ``/p/aj/mblog/getlongtext``.

A visible page holds 45 posts in three chunks of 15 (docs/SITE_RESPONSES.md §1.1). The chunk comes from the
(pre_page, page, pagebar) triple: ``pagebar=1`` is the last chunk (it carries the pager with ``countPage``);
``pagebar=0`` is the middle chunk when ``pre_page == page`` and the first chunk when ``pre_page == page-1``
(v5 style) or when ``pagebar`` is missing. The envelope is ``{"code":"100000","msg":"","data":"<html>"}``
with PHP-style escapes; an empty chunk is ``data == ""``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import ClassVar

from sandbox.content import SimPost, beijing
from sandbox.pages import passport_page
from sandbox.scenario import WeiboUser
from sandbox.sites import SiteContext
from sandbox.sites.weibo import WeiboMarkup, has_weibo_session, text_html, topic_query
from sandbox.web import SimRequest, SimResponse, page_count, php_json
from sandbox.world import World

__all__ = [
    "CHUNKS_PER_PAGE",
    "CHUNK_SIZE",
    "WeiboPcSite",
    "chunk_html",
    "display_time",
    "liked_title",
    "make_site",
    "mbloglist_body",
    "pager_html",
    "post_html",
]

CHUNK_SIZE = 15
CHUNKS_PER_PAGE = 3
OK_CODE = "100000"

MARKUP = WeiboMarkup(
    topic=lambda t: f'<a class="a_topic" target="_blank" href="//s.weibo.com/weibo?q={topic_query(t)}">{t}</a>',
    emoji=lambda e: (
        f'<img class="W_img_face" render="ext" src="//img.t.sinajs.cn/t4/appstyle/expression/ext/normal/'
        f'ee/doge_org.png" title="{e}" alt="{e}" type="face" />'
    ),
    more=lambda p: (
        f'<a target="_blank" href="/{p.uid}/{p.bid}" class="WB_text_opt" suda-data="key=tblog_profile'
        f'&value=unfold" action-type="fl_unfold" action-data="mid={p.mid}&is_settop&is_sethot">展开全文'
        f'<i class="W_ficon ficon_arrow_down">c</i></a>'
    ),
)

_LAZYLOAD = (
    '<div class="WB_cardwrap S_bg2" node-type="lazyload"><div class="WB_empty WB_empty_narrow">'
    '<div class="WB_innerwrap"><div class="empty_con clearfix"><p class="text">'
    '<i class="W_loading"></i>正在加载中，请稍候...</p></div></div></div></div>'
)


def display_time(created_ms: int, now_ms: int) -> str:
    """The date link's text, relative to server time: 刚刚, N秒前, ' N分钟前', 今天 HH:MM, M月D日 HH:MM, YYYY-M-D."""
    age_s = max(0, (now_ms - created_ms) // 1000)
    when, now = beijing(created_ms), beijing(now_ms)
    if age_s < 10:
        return "刚刚"
    if age_s < 60:
        return f"{age_s}秒前"
    if age_s < 3600:
        return f" {age_s // 60}分钟前"
    if when.date() == now.date():
        return f"今天 {when:%H:%M}"
    if when.year == now.year:
        return f"{when.month}月{when.day}日 {when:%H:%M}"
    return f"{when.year}-{when.month}-{when.day} {when:%H:%M}"


def _count_em(value: int, label: str) -> str:
    return str(value) if value else label


class WeiboPcSite:
    prefix: ClassVar[str] = "pc"

    def __init__(self, world: World) -> None:
        self.world = world

    def target_of(self, request: SimRequest) -> str:
        if request.path.startswith("/u/"):
            return request.path[3:].strip("/")
        page_id = request.query.get("id", "")
        return page_id[6:] if len(page_id) > 6 and page_id.isdigit() else ""

    def logged_in(self, request: SimRequest) -> bool:
        return has_weibo_session(request)

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        return SimResponse(200, passport_page(), "text/html; charset=GBK")

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == "/p/aj/v6/mblog/mbloglist":
            return self._mbloglist(request)
        if request.path.startswith("/u/"):
            return self._profile(request)
        if request.path == "/p/aj/mblog/getlongtext":
            return self._long_text(request)
        return SimResponse.not_found()

    def _user(self, uid_text: str) -> WeiboUser | None:
        user = self.world.user(int(uid_text)) if uid_text.isdigit() else None
        return user if user is not None and "pc" in user.sites else None

    @staticmethod
    def _chunk(request: SimRequest, page: int) -> int:
        pagebar = request.query.get("pagebar", "")
        if pagebar == "1":
            return 2
        if pagebar == "0" and request.int_param("pre_page", page - 1) == page:
            return 1
        return 0

    def _mbloglist(self, request: SimRequest) -> SimResponse:
        user = self._user(self.target_of(request))
        page = max(1, request.int_param("page", 1))
        fragment = self._fragment(user, page, self._chunk(request, page), request.now_ms) if user else ""
        return SimResponse(200, mbloglist_body(fragment), "application/json; charset=utf-8")

    def _fragment(self, user: WeiboUser, page: int, chunk: int, now_ms: int) -> str:
        posts = self.world.timeline(user.uid, now_ms) or []
        start = ((page - 1) * CHUNKS_PER_PAGE + chunk) * CHUNK_SIZE
        pages = page_count(len(posts), CHUNK_SIZE * CHUNKS_PER_PAGE)
        shown = posts[start : start + CHUNK_SIZE]
        liked = self._liked(user, now_ms) if page == 1 and chunk == 0 and shown else None
        return chunk_html(
            shown, uid=user.uid, domain=user.domain, page=page, chunk=chunk, pages=pages, now_ms=now_ms, liked=liked
        )

    def _liked(self, user: WeiboUser, now_ms: int) -> SimPost | None:
        """The post ``user`` liked, as the real feed shows one among its own: the oldest of the next desktop user
        (older than anything a crawl's cursor holds, so a crawler that took it for the user's post would stop)."""
        if not user.shows_likes:
            return None
        others = sorted(uid for uid, state in self.world.users.items() if uid != user.uid and "pc" in state.spec.sites)
        if not others:
            return None
        later = [uid for uid in others if uid > user.uid]
        timeline = self.world.timeline((later or others)[0], now_ms) or []
        return timeline[-1] if timeline else None

    def _profile(self, request: SimRequest) -> SimResponse:
        user = self._user(self.target_of(request))
        if user is None:
            return SimResponse.redirect("/pc/")
        page = max(1, request.int_param("page", 1))
        view = php_json(
            {
                "ns": "pl.content.homeFeed.index",
                "domid": "Pl_Official_MyProfileFeed__23",
                "css": [],
                "js": [],
                "html": self._fragment(user, page, 0, request.now_ms),
            }
        )
        name = html.escape(user.display_name)
        page_html = (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{name}的微博_微博</title>'
            f"<script type=\"text/javascript\">var $CONFIG = {{}};$CONFIG['oid']='{user.uid}';"
            f"$CONFIG['domain']='{user.domain}';$CONFIG['page_id']='{user.domain}{user.uid}';"
            f"$CONFIG['servertime']='{request.now_ms // 1000}';</script></head><body class=\"FRAME_page\">"
            f"<script>FM.view({view})</script></body></html>"
        )
        return SimResponse.html(page_html)

    def _long_text(self, request: SimRequest) -> SimResponse:
        mid = request.query.get("mid", "")
        post = self.world.post(int(mid), request.now_ms) if mid.isdigit() else None
        if post is None:
            return SimResponse(
                200, php_json({"code": "100001", "msg": "", "data": {}}).encode(), "application/json; charset=utf-8"
            )
        data = {"code": OK_CODE, "msg": "", "data": {"html": text_html(post, MARKUP, full=True)}}
        return SimResponse(200, php_json(data).encode(), "application/json; charset=utf-8")


def _date_link(post: SimPost, now_ms: int) -> str:
    when = beijing(post.created_ms)
    return (
        f'<a target="_blank" href="/{post.uid}/{post.bid}?from=page_100505_profile&wvr=6&mod=weibotime" '
        f'title="{when:%Y-%m-%d %H:%M}" date="{post.created_ms}" class="S_txt2" '
        f'node-type="feed_list_item_date" suda-data="key=tblog_home_new&value=feed_time:{post.mid}:fromprofile"'
        f' name="{post.mid}">{display_time(post.created_ms, now_ms)}</a>'
    )


def _forward(original: SimPost, now_ms: int) -> str:
    name = html.escape(original.user_name)
    return (
        f'<div class="WB_feed_expand"><div class="W_arrow_bor W_arrow_bor_t"><i class="S_bg1_br"></i></div>'
        f'<div class="WB_expand S_bg1" node-type="feed_list_forwardContent">'
        f'<div class="WB_info"><a suda-uatrack="key=feed_headnick" node-type="feed_list_originNick" '
        f'class="W_fb S_txt1" usercard="id={original.uid}" title="{name}" href="/u/{original.uid}">@{name}</a>'
        f'</div><div class="WB_text" node-type="feed_list_reason">{text_html(original, MARKUP, full=True)}'
        f'</div><div class="WB_func clearfix"><div class="WB_from S_txt2">{_date_link(original, now_ms)}'
        f"</div></div></div></div>"
    )


def post_html(post: SimPost, now_ms: int, *, title: str = "") -> str:
    """One ``feed_list_item`` card of the v6 profile feed (docs/SITE_RESPONSES.md §1.3), ``title`` above it."""
    name = html.escape(post.user_name)
    tbinfo = f"ouid={post.uid}"
    extra = ""
    if post.retweet is not None:
        tbinfo += f"&rouid={post.retweet.uid}"
        extra = f' isforward="1" omid="{post.retweet.mid}"'
    forward = _forward(post.retweet, now_ms) if post.retweet is not None else ""
    if post.pictures:
        thumbs = "".join(
            f'<li class="WB_pic li_{k + 1} S_bg1 S_line2 bigcursor" action-type="fl_pics" '
            f'action-data="pic_id={pid}"><img src="//wx1.sinaimg.cn/thumb150/{pid}.jpg"></li>'
            for k, pid in enumerate(post.pictures)
        )
        forward = (
            f'<div class="WB_media_wrap clearfix"><div class="media_box">'
            f'<ul class="WB_media_a WB_media_a_m{len(post.pictures)} clearfix" '
            f'node-type="feed_list_media_prev">{thumbs}</ul></div></div>{forward}'
        )
    handles = "".join(
        f'<li><a href="javascript:void(0);" class="S_txt2" action-type="{action}"><span class="pos">'
        f'<span class="line S_line1"><span><em class="W_ficon {icon} S_ficon">{glyph}</em><em>'
        f"{_count_em(value, label)}</em></span></span></span></a></li>"
        for action, icon, glyph, value, label in (
            ("fl_forward", "ficon_forward", "&#xe607;", post.reposts, "转发"),
            ("fl_comment", "ficon_repeat", "&#xe608;", post.comments, "评论"),
            ("fl_like", "ficon_praised", "ñ", post.likes, "赞"),
        )
    )
    return (
        f'<div class="WB_cardwrap WB_feed_type S_bg2 WB_feed_like" tbinfo="{html.escape(tbinfo)}"{extra} '
        f'action-type="feed_list_item" diss-data="" mid="{post.mid}">{title}'
        f'<div class="WB_feed_detail clearfix" node-type="feed_content">'
        f'<div class="WB_face W_fl"><div class="face"><a target="_blank" class="W_face_radius" '
        f'href="/u/{post.uid}?refer_flag=1005055013_" title="{name}"><img usercard="id={post.uid}" title="{name}"'
        f' alt="" width="50" height="50" src="//tva1.sinaimg.cn/crop.0.0.180.180.50/{post.uid:x}jw8e.jpg" '
        f'class="W_face_radius" /></a></div></div>'
        f'<div class="WB_detail"><div class="WB_info"><a suda-uatrack="key=feed_headnick" target="_blank" '
        f'class="W_f14 W_fb S_txt1" usercard="id={post.uid}&type=0&refer_flag=1005055013_" '
        f'href="/u/{post.uid}?refer_flag=1005055013_">{name}</a></div>'
        f'<div class="WB_from S_txt2">{_date_link(post, now_ms)} 来自 <a class="S_txt2" '
        f'action-type="app_source" target="_blank" href="http://app.weibo.com/t/feed/6vtZb0" rel="nofollow">'
        f"微博 weibo.com</a></div>"
        f'<div class="WB_text W_f14" node-type="feed_list_content" nick-name="{name}">\n'
        f"{text_html(post, MARKUP, full=False)}</div>{forward}</div></div>"
        f'<div class="WB_feed_handle"><div class="WB_handle"><ul class="WB_row_line WB_row_r4 clearfix S_line2">'
        f"{handles}</ul></div></div></div>"
    )


def pager_html(uid: int, domain: str, page: int, pages: int) -> str:
    """The last chunk's pager: ``countPage`` in the action-data and one link per visible page."""
    base = f"/p/{domain}{uid}/home?pids=Pl_Official_MyProfileFeed__23&is_all=1&profile_ftype=1"
    links = "".join(
        f'<li{' class="cur"' if k == page else ""}><a bpfilter="page" class="page S_bg1" '
        f'href="{base}&page={k}#feedtop">第&nbsp;{k}&nbsp;页</a></li>'
        for k in range(1, pages + 1)
    )
    nav = ""
    if page > 1:
        nav += (
            f'<a bpfilter="page" class="page prev S_txt1 S_line1" href="{base}&page={page - 1}#feedtop">'
            f"<span>上一页</span></a>"
        )
    if page < pages:
        nav += (
            f'<a bpfilter="page" class="page next S_txt1 S_line1" href="{base}&page={page + 1}#feedtop">'
            f"<span>下一页</span></a>"
        )
    return (
        f'<div class="WB_cardwrap S_bg2" node-type="feed_list_page"><div class="W_pages">'
        f'<span class="list"><a action-type="feed_list_page_more" action-data="currentPage={page}'
        f'&countPage={pages}" href="javascript:void(0);" class="page S_txt1">第{page}页'
        f'<em class="W_ficon ficon_arrow_down S_ficon">c</em></a>'
        f'<div class="layer_menu_list W_scroll" action-type="feed_list_page_morelist"><ul>{links}</ul></div>'
        f"</span>{nav}</div></div>"
    )


def liked_title(uid: int) -> str:
    """The card title over a post the account liked, linking to its likes page."""
    return (
        f'<div class="WB_cardtitle_b S_line2"><h4 class="obj_name S_txt2"><span class="main_title">'
        f'<i class="W_ficon ficon_praised S_ficon">ñ</i></span><span class="subtitle"><a target="_blank" '
        f'href="/{uid}/like?from=page_100505_profile&wvr=6&mod=like#status">TA赞过的微博</a></span></h4></div>'
    )


def chunk_html(
    shown: Sequence[SimPost],
    *,
    uid: int,
    domain: str,
    page: int,
    chunk: int,
    pages: int,
    now_ms: int,
    liked: SimPost | None = None,
) -> str:
    """Chunk ``chunk`` (0-2) of visible page ``page`` showing ``shown``: the posts (``liked``, another account's
    post, after the first), then the lazy-load placeholder (chunks 0 and 1) or the pager of ``pages`` pages
    (chunk 2); "" for an empty early chunk."""
    if not shown and chunk < CHUNKS_PER_PAGE - 1:
        return ""
    cards = [post_html(post, now_ms) for post in shown]
    if liked is not None:
        cards.insert(1, post_html(liked, now_ms, title=liked_title(uid)))
    feed = "".join(cards)
    if chunk < CHUNKS_PER_PAGE - 1:
        return feed + _LAZYLOAD
    return feed + (pager_html(uid, domain, page, pages) if pages else "")


def mbloglist_body(fragment: str) -> bytes:
    """The ``mbloglist`` envelope around a chunk's HTML, PHP-escaped as on the wire."""
    return php_json({"code": OK_CODE, "msg": "", "data": fragment}).encode()


def make_site(context: SiteContext) -> WeiboPcSite:
    """The ``weibo_pc`` source's site (the sandbox finds it by the source's name)."""
    return WeiboPcSite(context.world)
