"""An ECSHOP mall (default theme) under ``/ecshop``: ``goods.php?id=N`` with the rendered comment list,
``comment.php?act=gotopage`` (the ``{error, message, content}`` JSON of docs/SITE_RESPONSES.md §3), ``category.php``
goods lists with the numbered pager, the ``user.php`` member login, and the shop index.

Like stock ECSHOP: 5 comments per page, newest first, no comment ids; unknown goods and categories redirect to
``./``; under a login wall every content page redirects to ``user.php`` until the ``ECS_ID`` session cookie
from a successful ``act=act_login`` POST comes back.
"""

from __future__ import annotations

import hashlib
import html
import threading
from collections.abc import Sequence
from typing import ClassVar

from sandbox.content import SimReview, beijing
from sandbox.sites import SiteContext
from sandbox.web import SimRequest, SimResponse, page_count, page_slice, php_json
from sandbox.world import World

__all__ = [
    "COMMENTS_PER_PAGE",
    "SESSION_COOKIE",
    "EcshopSite",
    "comment_li",
    "comments_html",
    "goods_html",
    "gotopage_body",
    "make_site",
]

COMMENTS_PER_PAGE = 5
SESSION_COOKIE = "ECS_ID"
#: What comment.php puts in ``message`` even for pure pagination (the cmt_submit_done string).
_GOTOPAGE_MESSAGE = "您的评论已成功发表, 感谢您的参与!"
_WALLED = ("/goods.php", "/comment.php", "/category.php")


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" '
        f'"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml">'
        f'<head><meta http-equiv="Content-Type" content="text/html; charset=utf-8" />'
        f"<title>{title}_沙盒商城</title>"
        f'<link href="themes/default/style.css" rel="stylesheet" type="text/css" /></head><body>'
        f'<div class="block clearfix"><div id="ur_here">{body}</div></div></body></html>'
    )


def _crumbs(category_id: int, category_name: str, here: str = "") -> str:
    """The ``ur_here`` breadcrumb (which also gives every page a self-link to its category)."""
    tail = f" <code>&gt;</code> {here}" if here else ""
    return (
        f'<a href=".">首页</a> <code>&gt;</code> <a href="category.php?id={category_id}">{category_name}</a>'
        f'{tail}</div></div><div class="block clearfix">'
    )


def closed_page() -> bytes:
    """The notice a closed shop shows in place of its pages (ECSHOP's ``shop_closed`` setting): ``init.php`` prints its
    ``shop_closed`` line, then the owner's ``close_comment`` (ours), and stops."""
    return (
        '<div style="margin: 150px; text-align: center; font-size: 14px"><p>本店盘点中，请您稍后再来...</p>'
        "<p>系统维护，稍后开放</p></div>"
    ).encode()


class EcshopSite:
    prefix: ClassVar[str] = "ecshop"

    def __init__(self, world: World, accounts: dict[str, str]) -> None:
        self.world = world
        self.accounts = accounts
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()

    def ban_answer(self, kind: str, now_s: int) -> SimResponse:
        """An ECSHOP shop has no ban page of its own; what it shows in place of every page when the owner closes
        it (本店盘点中…) stands for the ``ban_rate`` misbehaviour, whatever its ``ban_page``."""
        return SimResponse(200, closed_page(), "text/html; charset=utf-8")

    def target_of(self, request: SimRequest) -> str:
        value = request.query.get("id", "")
        return value if value.isdigit() else ""

    def logged_in(self, request: SimRequest) -> bool:
        with self._lock:
            return request.cookies.get(SESSION_COOKIE, "") in self._sessions

    def login_wall(self, request: SimRequest) -> SimResponse | None:
        return SimResponse.redirect("user.php") if request.path in _WALLED else None

    def handle(self, request: SimRequest) -> SimResponse:
        routes = {
            "/goods.php": self._goods,
            "/comment.php": self._comment,
            "/category.php": self._category,
            "/user.php": self._user,
            "/": self._index,
            "/index.php": self._index,
        }
        route = routes.get(request.path)
        return route(request) if route is not None else SimResponse.not_found()

    # --- members ----------------------------------------------------------------------------------------

    def _user(self, request: SimRequest) -> SimResponse:
        act = request.form.get("act") or request.query.get("act", "login")
        if request.method == "POST" and act == "act_login":
            username, password = request.form.get("username", ""), request.form.get("password", "")
            if username in self.accounts and self.accounts[username] == password:
                token = hashlib.sha1(f"{username}|{request.now_ms}|{len(self._sessions)}".encode()).hexdigest()
                with self._lock:
                    self._sessions[token] = username
                response = self._message("登录成功", f"欢迎回来，{html.escape(username)}！", "user.php")
                response.headers["Set-Cookie"] = f"{SESSION_COOKIE}={token}; path=/"
                return response
            return self._message("用户名或密码错误", "请重新登录。", "user.php")
        if act == "logout":
            with self._lock:
                self._sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
            response = self._message("您已经成功退出", "", "index.php")
            response.headers["Set-Cookie"] = f"{SESSION_COOKIE}=; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT"
            return response
        if self.logged_in(request):
            name = html.escape(self._sessions.get(request.cookies.get(SESSION_COOKIE, ""), ""))
            return SimResponse.html(
                _page("用户中心", f'<div class="userMenu">您好，{name} <a href="user.php?act=logout">退出</a></div>')
            )
        form = (
            '<div class="usBox"><form name="formLogin" action="user.php" method="post" '
            'onSubmit="return userLogin()"><table><tr><td>用户名</td><td><input name="username" type="text" '
            'size="25" class="inputBg" /></td></tr><tr><td>密码</td><td><input name="password" type="password" '
            'size="15" class="inputBg"/></td></tr><tr><td><input type="checkbox" value="1" name="remember" '
            'id="remember" /><label for="remember">请保存我这次的登录信息。</label></td></tr><tr><td>'
            '<input type="hidden" name="act" value="act_login" /><input type="hidden" name="back_act" value="" />'
            '<input type="submit" name="submit" value="" class="us_Submit" /></td></tr></table></form></div>'
        )
        return SimResponse.html(_page("用户登录", form))

    def _message(self, title: str, detail: str, back: str) -> SimResponse:
        body = (
            f'<div class="box"><div class="box_1"><h3><span>系统信息</span></h3><div class="boxCenterList '
            f'RelaArticle" align="center"><div style="margin:20px auto;"><p style="font-size: 14px; font-weight:'
            f'bold; color: red;">{title}</p><p>{detail}</p><div class="blank"></div><a href="{back}">返回上一页'
            f"</a></div></div></div></div>"
        )
        return SimResponse.html(_page("系统信息", body))

    # --- goods and comments -------------------------------------------------------------------------------

    def _goods(self, request: SimRequest) -> SimResponse:
        goods_id = self.target_of(request)
        state = self.world.product("ecshop", goods_id, request.now_ms) if goods_id else None
        reviews = self.world.reviews("ecshop", goods_id, request.now_ms) if state is not None else None
        if state is None or reviews is None:
            return SimResponse.redirect("./")
        page = goods_html(goods_id, state.spec.display_name, state.spec.category, self._comments(goods_id, reviews, 1))
        return SimResponse.html(page)

    def _comment(self, request: SimRequest) -> SimResponse:
        if request.query.get("act") != "gotopage":
            return SimResponse.redirect("./")
        goods_id = self.target_of(request)
        reviews = (self.world.reviews("ecshop", goods_id, request.now_ms) if goods_id else None) or []
        page = max(1, request.int_param("page", 1))
        return SimResponse(200, gotopage_body(self._comments(goods_id, reviews, page)), "text/html; charset=utf-8")

    @staticmethod
    def _comments(goods_id: str, reviews: list[SimReview], page: int) -> str:
        """Page ``page`` of the comment list (the last page past the end)."""
        pages = max(1, page_count(len(reviews), COMMENTS_PER_PAGE))
        page = min(page, pages)
        shown = page_slice(reviews, page, COMMENTS_PER_PAGE)
        return comments_html(goods_id, shown, page=page, pages=pages, total=len(reviews))

    # --- categories and index -------------------------------------------------------------------------------

    def _category(self, request: SimRequest) -> SimResponse:
        cat_id = self.target_of(request)
        found = self.world.category(int(cat_id), request.now_ms) if cat_id else None
        if found is None:
            return SimResponse.redirect("./")
        category, goods_ids = found
        pages = max(1, page_count(len(goods_ids), category.per_page))
        page = min(max(1, request.int_param("page", 1)), pages)
        items = []
        for goods_id in page_slice(goods_ids, page, category.per_page):
            state = self.world.product("ecshop", goods_id, request.now_ms)
            name = html.escape(state.spec.display_name if state is not None else goods_id)
            items.append(
                f'<div class="goodsItem"><a href="goods.php?id={goods_id}"><img src="images/{goods_id}.jpg"'
                f' alt="{name}" class="goodsimg" /></a><br /><p><a href="goods.php?id={goods_id}" '
                f'title="{name}">{name}</a></p><font class="shop_s">￥{100 + int(goods_id) % 900}元</font>'
                f"</div>"
            )

        def url(target: int) -> str:
            return (
                f"category.php?id={category.id}&amp;price_min=0&amp;price_max=0&amp;page={target}"
                f"&amp;sort=goods_id&amp;order=DESC"
            )

        numbers = "".join(
            f'<span class="page_now">{k}</span>' if k == page else f'<a href="{url(k)}">[{k}]</a>'
            for k in range(1, pages + 1)
        )
        nav_prev = (
            f'<a href="{url(1)}">第一页</a> <a class="prev" href="{url(page - 1)}">上一页</a>' if page > 1 else ""
        )
        nav_next = (
            f'<a class="next" href="{url(page + 1)}">下一页</a> <a class="last" href="{url(pages)}">最末页</a>'
            if page < pages
            else ""
        )
        name = html.escape(category.display_name)
        body = (
            f'{_crumbs(category.id, name)}<div class="box"><div class="box_1"><h3><span>商品列表</span></h3>'
            f'<form name="compareForm" action="compare.php" method="post"><div class="centerPadd">'
            f'<div class="clearfix goodsBox" style="border:none;">{"".join(items)}</div></div></form></div></div>'
            f'<form name="selectPageForm" action="category.php" method="get"><div id="pager" class="pagebar">'
            f'<span class="f_l f6" style="margin-right:10px;">总计 <b>{len(goods_ids)}</b>  个记录</span>'
            f'{nav_prev}{numbers}{nav_next}<input type="hidden" name="id" value="{category.id}" /></div>'
            f"</form><div>"
        )
        return SimResponse.html(_page(name, body))

    def _index(self, request: SimRequest) -> SimResponse:
        links = "".join(
            f'<a href="category.php?id={cat_id}">{html.escape(state.spec.display_name)}</a> '
            for cat_id, state in sorted(self.world.categories.items())
        )
        return SimResponse.html(_page("首页", f'<a href=".">首页</a></div></div><div id="category_tree">{links}<div>'))


def comment_li(review: SimReview) -> str:
    """One comment: user (or 匿名用户), time, stars, text, and the shop's reply if any."""
    user = html.escape(review.user) if review.user else "匿名用户"
    text = html.escape(review.text).replace("\n", "<br />")
    reply = f'<p><font class="f1">管理员：</font>{html.escape(review.admin_reply)}</p>' if review.admin_reply else ""
    return (
        f'<li class="word"><font class="f2">{user}</font> <font class="f3">( '
        f"{beijing(review.created_ms):%Y-%m-%d %H:%M:%S} )</font><br />"
        f'<img src="../images/stars{review.score}.gif" alt="" /><p>{text}</p>{reply}</li>'
    )


def comments_html(goods_id: str, shown: Sequence[SimReview], *, page: int, pages: int, total: int) -> str:
    """``library/comments_list.lbi`` for page ``page`` of ``pages`` showing ``shown`` of ``total`` comments (the
    same markup in goods.php and comment.php)."""
    items = "".join(comment_li(r) for r in shown) or "<li>暂时还没有任何用户评论</li>"

    def link(label: str, target: int, enabled: bool) -> str:
        href = f"javascript:gotoPage({target},{goods_id},0)" if enabled else "javascript:;"
        return f'<a href="{href}">{label}</a>'

    pager = (
        f'<div id="pagebar" class="f_r"><form name="selectPageForm" action="comment.php" method="get">'
        f'<div id="pager">总计 {total} 个记录，共 {pages} 页。 <span> {link("第一页", 1, page > 1)} '
        f"{link('上一页', page - 1, page > 1)} {link('下一页', page + 1, page < pages)} "
        f"{link('最末页', pages, page < pages)} </span></div></form></div>"
    )
    form = (
        f'<div class="commentsList"><form action="javascript:;" onsubmit="submitComment(this)" '
        f'method="post" name="commentForm" id="commentForm"><textarea name="content" class="inputBorder">'
        f'</textarea><input type="hidden" name="cmt_type" value="0" /><input type="hidden" name="id" '
        f'value="{goods_id}" /></form></div>'
    )
    return (
        f'<div class="box"><div class="box_1"><h3><span class="text">用户评论</span>(共<font class="f1">'
        f'{total}</font>条评论)</h3><div class="boxCenterList clearfix" style="height:1%;">'
        f'<ul class="comments">{items}</ul><div class="clearfix">{pager}</div></div>{form}</div></div>'
    )


def goods_html(goods_id: str, display_name: str, category: int, comments: str) -> str:
    """``goods.php?id=N``: the goods info and page 1 of its comments (``comments``) inside ``#ECS_COMMENT``."""
    name = html.escape(display_name)
    body = (
        f'{_crumbs(category, "分类", name)}<div id="goodsInfo">'
        f'<h1>{name}</h1><form action="javascript:addToCart({goods_id})" method="post" name="ECS_FORMBUY" '
        f'id="ECS_FORMBUY"><input type="hidden" name="goods_id" value="{goods_id}" /></form></div>'
        f'<div id="ECS_COMMENT">{comments}</div><div>'
    )
    return _page(name, body)


def gotopage_body(comments: str) -> bytes:
    """``comment.php?act=gotopage``'s ``{error, message, content}`` JSON around one page of ``comments``."""
    content = (
        '<meta http-equiv="Content-Type" content="text/html; charset=utf-8">\n<!--用户评论 START-->'
        + comments
        + "<!--用户评论 END-->"
    )
    return php_json({"error": 0, "message": _GOTOPAGE_MESSAGE, "content": content}).encode()


def make_site(context: SiteContext) -> EcshopSite:
    """The ``ecshop`` source's site (the sandbox finds it by the source's name)."""
    return EcshopSite(context.world, context.accounts)
