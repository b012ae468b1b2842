/* The exact language of the JSON numbers in a range (schema_num.h): integers by digit
 * count, decimals by integer part and then fraction digits compared with the bounds' own
 * digits, one digit at a time. */
#include "schema_num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"

static void digits_str(unsigned long long v, int n, char *out) {
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
    out[n] = 0;
}

/* Strings of n digits from a to b (same length), as a GBNF sequence. */
static void same_len(struct sbuf *b, const char *a, const char *z, int n) {
    if (n == 0) {
        sbuf_adds(b, "\"\"");
        return;
    }
    if (a[0] == z[0]) {
        sbuf_addf(b, "\"%c\" ", a[0]);
        same_len(b, a + 1, z + 1, n - 1);
        return;
    }
    int rest_min = 1, rest_max = 1;
    for (int i = 1; i < n; i++) {
        rest_min &= a[i] == '0';
        rest_max &= z[i] == '9';
    }
    if (rest_min && rest_max) {
        sbuf_addf(b, "[%c-%c]", a[0], z[0]);
        if (n > 1) sbuf_addf(b, " [0-9]{%d}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    sbuf_addf(b, "(\"%c\" ", a[0]);
    same_len(b, a + 1, nines, n - 1);
    if (z[0] - a[0] > 1) {
        sbuf_addf(b, " | [%c-%c]", a[0] + 1, z[0] - 1);
        if (n > 1) sbuf_addf(b, " [0-9]{%d}", n - 1);
    }
    sbuf_addf(b, " | \"%c\" ", z[0]);
    same_len(b, zeros, z + 1, n - 1);
    sbuf_adds(b, ")");
}

static int ndigits(unsigned long long v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Non-negative integers in [lo, hi] without leading zeros, as alternatives. */
static void range_nonneg(struct sbuf *b, unsigned long long lo, unsigned long long hi, int *alts) {
    unsigned long long p = 1;
    for (int d = 1; d <= ndigits(hi); d++, p *= 10) {
        unsigned long long a = lo > (d == 1 ? 0 : p) ? lo : (d == 1 ? 0 : p),
                           z = hi < p * 10 - 1 ? hi : p * 10 - 1;
        if (a > z) continue;
        char as[24], zs[24];
        digits_str(a, d, as);
        digits_str(z, d, zs);
        sbuf_adds(b, (*alts)++ ? " | " : "");
        same_len(b, as, zs, d);
    }
}

#define INT_LIMIT 9999999999999999.0 /* 16 digits */
#define DEC_LIMIT 999999999999999.0  /* 15 digits */
#define DEC_DIGITS 15

static int integer_range(struct sbuf *b, double lo, int lo_x, double hi, int hi_x, char *err) {
    double l = isinf(lo) ? -INT_LIMIT : lo_x ? floor(lo) + 1 : ceil(lo);
    double h = isinf(hi) ? INT_LIMIT : hi_x ? ceil(hi) - 1 : floor(hi);
    if (l < -INT_LIMIT) l = -INT_LIMIT; /* beyond 16 digits: a subset of the range */
    if (h > INT_LIMIT) h = INT_LIMIT;
    if (l > h)
        return err_set(
            err,
            "unsatisfiable schema: no integer of at most 16 digits between minimum and maximum");
    long long ll = (long long)l, hh = (long long)h;
    int alts = 0;
    sbuf_adds(b, "(");
    if (ll < 0) {
        sbuf_adds(b, "\"-\" (");
        int a2 = 0;
        range_nonneg(b, (unsigned long long)(hh < 0 ? -hh : 1), (unsigned long long)-ll, &a2);
        sbuf_adds(b, ")");
        alts++;
    }
    if (hh >= 0)
        range_nonneg(b, (unsigned long long)(ll > 0 ? ll : 0), (unsigned long long)hh, &alts);
    /* more digits (up to the JSON integers' 40) where no bound reaches there */
    if (hi >= 1e40) sbuf_adds(b, " | [1-9] [0-9]{16,39}");
    if (lo <= -1e40) sbuf_adds(b, " | \"-\" [1-9] [0-9]{16,39}");
    sbuf_adds(b, ")");
    return 0;
}

/* A non-negative double as integer part and fraction digits (no trailing zeros), in the
 * fewest fraction digits that read back as the same double. -1 past 20 of them. */
struct dec {
    unsigned long long ip;
    char fp[24];
};

static int to_dec(double v, struct dec *d) {
    char t[64];
    for (int f = 0; f <= 20; f++) {
        snprintf(t, sizeof t, "%.*f", f, v);
        if (strtod(t, NULL) != v) continue;
        char *dot = strchr(t, '.');
        d->ip = strtoull(t, NULL, 10);
        snprintf(d->fp, sizeof d->fp, "%s", dot ? dot + 1 : "");
        size_t n = strlen(d->fp);
        while (n && d->fp[n - 1] == '0') d->fp[--n] = 0;
        return 0;
    }
    return -1;
}

/* Fraction digit strings t, 0 to n digits (1 to n when need), with D <= 0.t <= H (strict
 * where sD / sH); D, H: digit strings ("" is zero), NULL: no bound. 1 when some t exists. */
static int frac_digits(struct sbuf *o, const char *D, int sD, const char *H, int sH, int n,
                       int need) {
    if (D && !*D && !sD) D = NULL; /* >= 0 bounds nothing */
    struct sbuf r = {0};
    int alts = 0;
    int lower_empty_ok = !D, upper_empty_ok = !H || *H || !sH;
    if (!need && lower_empty_ok && upper_empty_ok) sbuf_adds(&r, alts++ ? " | \"\"" : "\"\"");
    for (int c = 0; c <= 9 && n > 0; c++) {
        int dl = D ? (*D ? *D - '0' : 0) : -1, dh = H ? (*H ? *H - '0' : 0) : 10;
        if (c < dl || c > dh) continue;
        int tl = c == dl, th = c == dh;
        if (!tl && !th) { /* free: a run of such digits, then anything */
            int e = c;
            while (e + 1 <= 9 && e + 1 < dh) e++;
            sbuf_addf(&r, "%s[%d-%d]", alts++ ? " | " : "", c, e);
            if (n > 1) sbuf_addf(&r, " [0-9]{0,%d}", n - 1);
            c = e;
            continue;
        }
        struct sbuf sub = {0};
        const char *D2 = tl ? (*D ? D + 1 : D) : NULL, *H2 = th ? (*H ? H + 1 : H) : NULL;
        if (frac_digits(&sub, D2, sD, H2, sH, n - 1, 0))
            sbuf_addf(&r, "%s\"%d\" %s", alts++ ? " | " : "", c, sub.p);
        sbuf_free(&sub);
    }
    if (alts) sbuf_addf(o, "(%s)", r.p);
    sbuf_free(&r);
    return alts > 0;
}

/* The fraction part ("" or "." digits) of numbers with integer part of nd digits. */
static int frac_part(struct sbuf *o, const char *D, int sD, const char *H, int sH, int nd) {
    int n = DEC_DIGITS - nd;
    struct sbuf t = {0};
    int ok = frac_digits(&t, D, sD, H, sH, n, 1);
    int empty = (!D || (!*D && !sD)) && (!H || *H || !sH);
    if (ok && empty) sbuf_addf(o, "(\".\" %s)?", t.p);
    else if (ok) sbuf_addf(o, "\".\" %s", t.p);
    else if (empty) sbuf_adds(o, "\"\"");
    sbuf_free(&t);
    return ok || empty;
}

/* Magnitudes y with L <= y <= H (strict where Lx / Hx), L <= H, both non-negative. */
static int magnitude_range(struct sbuf *o, double L, int Lx, double H, int Hx, int *alts) {
    struct dec l, h;
    if (to_dec(L, &l) < 0 || to_dec(H, &h) < 0) return -1;
    struct sbuf t = {0};
    int nl = ndigits(l.ip), nh = ndigits(h.ip);
    if (l.ip == h.ip) {
        if (frac_part(&t, l.fp, Lx, h.fp, Hx, nl))
            sbuf_addf(o, "%s\"%llu\" %s", (*alts)++ ? " | " : "", l.ip, t.p);
        sbuf_free(&t);
        return 0;
    }
    if (frac_part(&t, l.fp, Lx, NULL, 0, nl))
        sbuf_addf(o, "%s\"%llu\" %s", (*alts)++ ? " | " : "", l.ip, t.p);
    sbuf_free(&t);
    unsigned long long p = 1;
    for (int d = 1; d <= nh; d++, p *= 10) { /* integer parts strictly between, by digit count */
        unsigned long long a = l.ip + 1 > (d == 1 ? 0 : p) ? l.ip + 1 : (d == 1 ? 0 : p);
        unsigned long long z = h.ip - 1 < p * 10 - 1 ? h.ip - 1 : p * 10 - 1;
        if (h.ip == 0 || a > z) continue;
        char as[24], zs[24];
        digits_str(a, d, as);
        digits_str(z, d, zs);
        sbuf_adds(o, (*alts)++ ? " | (" : "(");
        same_len(o, as, zs, d);
        sbuf_adds(o, ")");
        if (DEC_DIGITS - d > 0) sbuf_addf(o, " (\".\" [0-9]{1,%d})?", DEC_DIGITS - d);
    }
    struct sbuf u = {0};
    if (frac_part(&u, NULL, 0, h.fp, Hx, nh))
        sbuf_addf(o, "%s\"%llu\" %s", (*alts)++ ? " | " : "", h.ip, u.p);
    sbuf_free(&u);
    return 0;
}

/* ---- exponents: d.ddd e N, the mantissa normalized (one digit 1-9 before the point, at
 * most DEC_DIGITS in all, so each compares as a double exactly as its decimal does) and
 * |N| <= EXP_MAX (normal doubles). Exponents strictly between those of the bounds take any
 * mantissa; at a bound's own exponent the mantissa is bounded by the bound's digits. */
#define EXP_MAX 99

/* A positive double's shortest decimal as d.ddd x 10^e: the mantissa into *m, e into *e; -1
 * when it has more than DEC_DIGITS significant digits. */
static int to_sci(double v, double *m, int *e) {
    struct dec d;
    if (to_dec(v, &d) < 0) return -1;
    char all[64], t[80];
    snprintf(all, sizeof all, "%llu%s", d.ip, d.fp);
    int ipn = d.ip ? ndigits(d.ip) : 0;
    const char *p = all;
    while (*p == '0') p++; /* leading zeros (an integer part of 0, fraction zeros) */
    *e = ipn ? ipn - 1 : -(int)(p - all);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '0') n--;
    if (n > DEC_DIGITS) return -1;
    snprintf(t, sizeof t, "%c.%.*s", p[0], (int)(n - 1), p + 1);
    *m = strtod(t, NULL);
    return 0;
}

/* The exponents a..b (|a|, |b| <= EXP_MAX): [eE], a sign, up to two leading zeros. */
static void exponents(struct sbuf *o, int a, int b) {
    int alts = 0;
    sbuf_adds(o, "[eE] (");
    if (b >= 0) {
        sbuf_adds(o, "\"+\"? \"0\"{0,2} (");
        int a2 = 0;
        range_nonneg(o, (unsigned long long)(a > 0 ? a : 0), (unsigned long long)b, &a2);
        sbuf_adds(o, ")");
        alts++;
    }
    if (a < 0) {
        sbuf_addf(o, "%s\"-\" \"0\"{0,2} (", alts ? " | " : "");
        int a2 = 0;
        range_nonneg(o, (unsigned long long)(b < 0 ? -b : 1), (unsigned long long)-a, &a2);
        sbuf_adds(o, ")");
    }
    sbuf_adds(o, ")");
}

/* Magnitudes y with L <= y <= H (strict where Lx / Hx; L >= 0, H may be INFINITY) written
 * with an exponent, as more alternatives into o. Nothing where a bound has more than
 * DEC_DIGITS significant digits. */
static void sci_range(struct sbuf *o, double L, int Lx, double H, int Hx, int *alts) {
    double ml = 1, mh = 10;
    int el = -EXP_MAX - 1, eh = EXP_MAX + 1;
    if ((L > 0 && to_sci(L, &ml, &el) < 0) || (!isinf(H) && to_sci(H, &mh, &eh) < 0)) return;
    if (L <= 0) el = -EXP_MAX - 1, ml = 1, Lx = 0;
    if (isinf(H)) eh = EXP_MAX + 1;
    int a = el + 1 > -EXP_MAX ? el + 1 : -EXP_MAX, b = eh - 1 < EXP_MAX ? eh - 1 : EXP_MAX;
    if (a <= b) {
        sbuf_addf(o, "%s[1-9] (\".\" [0-9]{1,%d})? ", (*alts)++ ? " | " : "", DEC_DIGITS - 1);
        exponents(o, a, b);
    }
    for (int side = 0; side < 2; side++) { /* the mantissas at the bounds' own exponents */
        int e = side ? eh : el;
        if (e < -EXP_MAX || e > EXP_MAX || (side && el == eh)) continue;
        double lo = side && el != eh ? 1 : ml, hi = !side && el != eh ? 10 : mh;
        int lx = side && el != eh ? 0 : Lx, hx = !side && el != eh ? 1 : Hx;
        struct sbuf t = {0};
        int a2 = 0;
        if (magnitude_range(&t, lo, lx, hi, hx, &a2) == 0 && a2) {
            sbuf_addf(o, "%s(%s) ", (*alts)++ ? " | " : "", t.p);
            exponents(o, e, e);
        }
        sbuf_free(&t);
    }
}

int schema_num_range(struct sbuf *b, double lo, int lo_x, double hi, int hi_x, int integer,
                     char *err) {
    if (integer) return integer_range(b, lo, lo_x, hi, hi_x, err);
    const double lo0 = lo, hi0 = hi; /* the exponents' bounds, not clamped */
    const int lo0_x = lo_x, hi0_x = hi_x;
    if (lo < -DEC_LIMIT) lo = -DEC_LIMIT, lo_x = 0; /* what 15 digits reach: a subset */
    if (hi > DEC_LIMIT) hi = DEC_LIMIT, hi_x = 0;
    if (lo > hi || (lo == hi && (lo_x || hi_x)))
        return err_set(err, "unsatisfiable schema: no number between minimum and maximum");
    struct sbuf o = {0};
    int alts = 0, rc = 0;
    if (hi > 0 || (hi == 0 && !hi_x)) /* x >= 0 */
        rc = magnitude_range(&o, lo > 0 ? lo : 0, lo >= 0 ? lo_x : 0, hi, hi_x, &alts);
    if (rc == 0 && hi0 > 0)
        sci_range(&o, lo0 > 0 ? lo0 : 0, lo0 > 0 ? lo0_x : 0, hi0, hi0_x, &alts);
    if (rc == 0 && lo < 0) { /* x < 0: "-" and the magnitude; 0 belongs to the part above */
        struct sbuf n = {0};
        int a2 = 0;
        rc = magnitude_range(&n, hi < 0 ? -hi : 0, hi < 0 ? hi_x : 1, -lo, lo_x, &a2);
        if (rc == 0) sci_range(&n, hi0 < 0 ? -hi0 : 0, hi0 < 0 ? hi0_x : 0, -lo0, lo0_x, &a2);
        if (a2) sbuf_addf(&o, "%s\"-\" (%s)", alts++ ? " | " : "", n.p);
        sbuf_free(&n);
    }
    if (rc < 0) err_set(err, "minimum/maximum with more than 20 decimals are not supported");
    else if (!alts)
        rc = err_set(
            err,
            "unsatisfiable schema: no number of at most 15 digits between minimum and maximum");
    else sbuf_addf(b, "(%s)", o.p);
    sbuf_free(&o);
    return rc;
}
