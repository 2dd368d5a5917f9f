"""m.weibo.cn under ``/m``: ``/api/container/getIndex`` (profile and timeline, ``page=`` and ``since_id=`` cursors)
and ``/statuses/extend`` (long text), in the wire format of docs/SITE_RESPONSES.md §2 (compact JSON, ``\\uXXXX``,
``\\/``).

The timeline's first page starts with the pinned post (``isTop: 1``, out of date order); each user's
``cursor`` setting decides whether ``cardlistInfo`` carries ``since_id`` (the mid the next page starts at) or
``page``. Requests with either form are served whatever the user's setting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from sandbox.content import SimPost
from sandbox.scenario import WeiboUser
from sandbox.sites import SiteContext
from sandbox.sites.weibo import WeiboMarkup, has_weibo_session, rfc2822_beijing, text_html, topic_query
from sandbox.web import SimRequest, SimResponse, php_json
from sandbox.world import World

__all__ = ["PAGE_SIZE", "WeiboMobileSite", "card_json", "make_site", "mblog_json", "timeline_body", "user_json"]

#: Posts per timeline page (the pinned post comes on top of page 1).
PAGE_SIZE = 10
TIMELINE_PREFIX = "107603"
PROFILE_PREFIX = "100505"
#: The profile tab's all-posts list: served as the same timeline (clients fall back to it).
SECOND_PROFILE = "230413{uid}_-_WEIBO_SECOND_PROFILE_WEIBO"
EMPTY = {"ok": 0, "msg": "这里还没有内容", "data": {"cards": []}}

MARKUP = WeiboMarkup(
    topic=lambda t: (
        f'<a  href="https://m.weibo.cn/search?containerid=231522type%3D1%26t%3D10%26q%3D'
        f'{topic_query(t)}&isnewpage=1" data-hide=""><span class="surl-text">{t}</span></a>'
    ),
    emoji=lambda e: (
        f'<span class="url-icon"><img alt={e} src="https://h5.sinaimg.cn/m/emoticon/icon/default/'
        f'd_doge-be7f768d78.png" style="width:1em; height:1em;" /></span>'
    ),
    more=lambda p: f' ...<a href="/status/{p.mid}">全文</a>',
)


def _count(value: int) -> int | str:
    """Huge counts come as display strings ("100万+"), like number_display_strategy."""
    return "100万+" if value >= 1_000_000 else value


class WeiboMobileSite:
    prefix: ClassVar[str] = "m"

    def __init__(self, world: World) -> None:
        self.world = world

    def target_of(self, request: SimRequest) -> str:
        value = request.query.get("value") or request.query.get("containerid", "")[len(TIMELINE_PREFIX) :]
        return value if value.isdigit() else ""

    def logged_in(self, request: SimRequest) -> bool:
        return has_weibo_session(request)

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        back = quote(f"https://m.weibo.cn{request.path}", safe="")
        return SimResponse.json(
            {"ok": -100, "msg": "请先登录", "url": f"https://passport.weibo.cn/signin/welcome?entry=mweibo&r={back}"},
            php=True,
        )

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == "/api/container/getIndex":
            return self._get_index(request)
        if request.path == "/statuses/extend":
            return self._extend(request)
        return SimResponse.not_found()

    def _user(self, uid_text: str) -> WeiboUser | None:
        if not uid_text.isdigit():
            return None
        user = self.world.user(int(uid_text))
        return user if user is not None and "m" in user.sites else None

    def _get_index(self, request: SimRequest) -> SimResponse:
        uid_text = self.target_of(request)
        user = self._user(uid_text)
        if user is None:
            return SimResponse.json(EMPTY, php=True)
        posts = self.world.timeline(user.uid, request.now_ms) or []
        containerid = request.query.get("containerid", "")
        if containerid not in (f"{TIMELINE_PREFIX}{user.uid}", SECOND_PROFILE.format(uid=user.uid)):
            return SimResponse.json(self._profile(user, posts), php=True)
        pinned = [p for p in posts if p.pinned]
        dated = [p for p in posts if not p.pinned]
        since = request.query.get("since_id", "")
        if since.isdigit():
            start = next((i for i, p in enumerate(dated) if p.mid <= int(since)), len(dated))
            first_page = False
        else:
            page = max(1, request.int_param("page", 1))
            start = (page - 1) * PAGE_SIZE
            first_page = page == 1
        chunk = dated[start : start + PAGE_SIZE]
        if not chunk:
            return SimResponse.json(EMPTY, php=True)
        cursor: dict[str, int] = {}
        following = start + PAGE_SIZE
        if following < len(dated):
            if user.cursor == "page":
                cursor["page"] = following // PAGE_SIZE + 1
            else:
                cursor["since_id"] = dated[following].mid
        shown = (pinned if first_page else []) + chunk
        body = timeline_body(shown, containerid=containerid, total=len(posts), cursor=cursor)
        return SimResponse(200, body, "application/json; charset=utf-8")

    def _profile(self, user: WeiboUser, posts: list[SimPost]) -> dict[str, Any]:
        info = user_json(user.uid, user.display_name, len(posts))
        tabs = [
            {"id": 1, "tabKey": "profile", "title": "主页", "tab_type": "profile", "containerid": f"230283{user.uid}"},
            {
                "id": 2,
                "tabKey": "weibo",
                "title": "微博",
                "tab_type": "weibo",
                "containerid": f"{TIMELINE_PREFIX}{user.uid}",
            },
        ]
        return {
            "ok": 1,
            "data": {
                "isVideoCoverStyle": 0,
                "userInfo": info,
                "tabsInfo": {"selectedTab": 1, "tabs": tabs},
                "showAppTips": 1,
            },
        }

    def _extend(self, request: SimRequest) -> SimResponse:
        mid = request.query.get("id", "")
        post = self.world.post(int(mid), request.now_ms) if mid.isdigit() else None
        if post is None:
            return SimResponse.json({"ok": 0, "errno": "20101", "msg": "微博不存在或暂无查看权限!"}, php=True)
        data = {
            "ok": 1,
            "longTextContent": text_html(post, MARKUP, full=True),
            "reposts_count": _count(post.reposts),
            "comments_count": _count(post.comments),
            "attitudes_count": _count(post.likes),
        }
        return SimResponse.json({"ok": 1, "data": data}, php=True)


def user_json(uid: int, name: str, statuses: int) -> dict[str, Any]:
    followers = 1455 + uid % 100_000
    return {
        "id": uid,
        "screen_name": name,
        "profile_image_url": f"https://tvax1.sinaimg.cn/crop.0.0.180.180.180/{uid:x}ly8g.jpg",
        "profile_url": f"https://m.weibo.cn/u/{uid}?uid={uid}&luicode=10000011&lfid={TIMELINE_PREFIX}{uid}",
        "statuses_count": statuses,
        "verified": False,
        "verified_type": -1,
        "close_blue_v": False,
        "description": "沙盒里的用户",
        "gender": "f" if uid % 2 else "m",
        "mbtype": 0,
        "urank": 12,
        "mbrank": 0,
        "follow_me": False,
        "following": False,
        "followers_count": f"{followers / 10000:.1f}万" if uid % 3 == 0 else followers,
        "follow_count": 200 + uid % 300,
        "avatar_hd": f"https://wx1.sinaimg.cn/orj480/{uid:x}ly8g.jpg",
        "like": False,
        "like_me": False,
    }


def mblog_json(post: SimPost, statuses: int) -> dict[str, Any]:
    """One post as a card's ``mblog`` (its original nested as ``retweeted_status``)."""
    mblog: dict[str, Any] = {
        "visible": {"type": 0, "list_id": 0},
        "created_at": rfc2822_beijing(post.created_ms),
        "id": str(post.mid),
        "mid": str(post.mid),
        "can_edit": False,
        "show_additional_indication": 0,
        "text": text_html(post, MARKUP, full=False),
        "textLength": len(post.text.encode("gbk")),
        "source": "iPhone客户端",
        "favorited": False,
        "pic_ids": [],
        "is_paid": False,
        "mblog_vip_type": 0,
        "user": user_json(post.uid, post.user_name, statuses),
        "reposts_count": _count(post.reposts),
        "comments_count": _count(post.comments),
        "attitudes_count": _count(post.likes),
        "pending_approval_count": 0,
        "isLongText": post.long_text,
        "mlevel": 0,
        "mblogtype": 0,
        "bid": post.bid,
        "pic_num": 0,
    }
    if post.pictures:
        mblog.update(
            pic_ids=list(post.pictures),
            pic_num=len(post.pictures),
            thumbnail_pic=f"https://wx1.sinaimg.cn/thumbnail/{post.pictures[0]}.jpg",
            bmiddle_pic=f"http://wx1.sinaimg.cn/bmiddle/{post.pictures[0]}.jpg",
            original_pic=f"https://wx1.sinaimg.cn/large/{post.pictures[0]}.jpg",
            pics=[
                {
                    "pid": pid,
                    "url": f"https://wx1.sinaimg.cn/orj360/{pid}.jpg",
                    "size": "orj360",
                    "geo": {"width": 360, "height": 480, "croped": False},
                    "large": {
                        "size": "large",
                        "url": f"https://wx1.sinaimg.cn/large/{pid}.jpg",
                        "geo": {"width": "1080", "height": "1440", "croped": False},
                    },
                }
                for pid in post.pictures
            ],
        )
    if post.pinned:
        mblog.update(isTop=1, mblogtype=2, title={"text": "置顶", "base_color": 1})
    if post.retweet is not None:
        mblog["retweeted_status"] = mblog_json(post.retweet, 100)
        mblog["raw_text"] = post.text
    return mblog


def card_json(post: SimPost, containerid: str, statuses: int) -> dict[str, Any]:
    return {
        "card_type": 9,
        "itemid": f"{containerid}_-_{post.mid}",
        "scheme": f"https://m.weibo.cn/status/{post.bid}?mblogid={post.bid}&luicode=10000011&lfid={containerid}",
        "mblog": mblog_json(post, statuses),
    }


def timeline_body(shown: Sequence[SimPost], *, containerid: str, total: int, cursor: Mapping[str, int]) -> bytes:
    """A getIndex timeline page showing ``shown`` (a pinned post first, if any); ``cursor`` is the next page's
    ``{"page": N}`` or ``{"since_id": mid}``, empty on the last page."""
    info: dict[str, Any] = {"containerid": containerid, "v_p": 42, "show_style": 1, "total": total, **cursor}
    data = {
        "cardlistInfo": info,
        "cards": [card_json(post, containerid, total) for post in shown],
        "scheme": f"sinaweibo://cardlist?containerid={containerid}&extparam=&luicode=10000011",
        "showAppTips": 0,
    }
    return php_json({"ok": 1, "data": data}).encode()


def make_site(context: SiteContext) -> WeiboMobileSite:
    """The ``weibo_mobile`` source's site (the sandbox finds it by the source's name)."""
    return WeiboMobileSite(context.world)
